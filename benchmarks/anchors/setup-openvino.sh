#!/usr/bin/env bash
# Creates the virtual environment that benchmarks/cpu/bench_model.py's OpenVINO GenAI rows run
# in: openvino-genai and optimum-intel (which pins another transformers than the project's).
#
# The venv is made with --system-site-packages, so torch (and numpy, safetensors, ...) come
# from the main environment (scripts/install-deps.sh) and are not downloaded again; what
# optimum-intel needs is installed into the venv, whose site-packages comes first on sys.path.
#
# Idempotent: a second run checks the pins and does nothing if they are there.
#   SNAPKV_OPENVINO_VENV  where the venv goes (default ~/.cache/snapkv/openvino-venv)
#   PYTHON                the main environment's interpreter (default python3)
set -euo pipefail

GENAI_VERSION=2026.4.1.0
OPTIMUM_INTEL_VERSION=2.2.0
EXTRA_PINS=("sentencepiece")

VENV=${SNAPKV_OPENVINO_VENV:-$HOME/.cache/snapkv/openvino-venv}
PYTHON=${PYTHON:-python3}
VPY="$VENV/bin/python"

die() { echo "openvino setup: error: $*" >&2; exit 1; }
say() { echo "openvino setup: $*"; }

"$PYTHON" -c "import torch" 2>/dev/null \
  || die "'$PYTHON -c \"import torch\"' fails: install the main environment first (scripts/install-deps.sh)"

if [ ! -x "$VPY" ]; then
  say "creating the venv $VENV ($PYTHON -m venv --system-site-packages)"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv --system-site-packages "$VENV" \
    || die "'$PYTHON -m venv' failed (Debian's python3-venv package missing?)"
fi

check() {
  "$VPY" - "$GENAI_VERSION" "$OPTIMUM_INTEL_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
genai, optimum = sys.argv[1:]
assert m.version("openvino-genai") == genai, m.version("openvino-genai")
assert m.version("optimum-intel") == optimum, m.version("optimum-intel")
import openvino_genai  # noqa: F401
import optimum.intel  # noqa: F401
PY
}

if check; then
  say "already set up in $VENV (openvino-genai==$GENAI_VERSION, optimum-intel==$OPTIMUM_INTEL_VERSION)"
  exit 0
fi

say "pip install openvino-genai==$GENAI_VERSION optimum-intel[openvino]==$OPTIMUM_INTEL_VERSION ${EXTRA_PINS[*]} into $VENV"
"$VPY" -m pip install -q --disable-pip-version-check "openvino-genai==$GENAI_VERSION" \
    "optimum-intel[openvino]==$OPTIMUM_INTEL_VERSION" "${EXTRA_PINS[@]}" \
  || die "pip install failed (see above)"
check || die "the venv $VENV does not import openvino_genai==$GENAI_VERSION and optimum-intel==$OPTIMUM_INTEL_VERSION"
"$VPY" -c "import openvino as ov, openvino_genai, transformers; print('openvino setup: ready:', '$VPY', '| openvino', ov.__version__, '| transformers', transformers.__version__)"
