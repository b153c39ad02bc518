#!/usr/bin/env bash
# Creates the virtual environment that benchmarks/kvpress/run.py runs in: NVIDIA's kvpress
# (PyPI) pinned, with the older transformers it accepts (kvpress 0.5.5 requires
# transformers<5.3; the project's main environment has transformers 5.24).
#
# The venv is made with --system-site-packages, so torch (and numpy, safetensors, ...) come
# from the main environment (scripts/install-deps.sh installs them) and are not downloaded
# again; transformers and kvpress's other requirements are installed into the venv, whose
# site-packages comes first on sys.path and so shadows the main environment's transformers.
#
# Idempotent: a second run checks the pins and does nothing if they are there.
#   SNAPKV_KVPRESS_VENV  where the venv goes (default ~/.cache/snapkv/kvpress-venv)
#   PYTHON               the main environment's interpreter (default python3)
set -euo pipefail

KVPRESS_VERSION=0.5.5
# The newest transformers below 5.3 (kvpress 0.5.5: transformers>=4.56,<5.3). A 5.x release,
# so that it reads the rope_parameters that transformers 5 writes into config.json.
TRANSFORMERS_VERSION=5.2.0
# kvpress requires accelerate>=1,<2; gguf is not needed (the checkpoint is already converted).
EXTRA_PINS=("accelerate>=1.0.0,<2")

VENV=${SNAPKV_KVPRESS_VENV:-$HOME/.cache/snapkv/kvpress-venv}
PYTHON=${PYTHON:-python3}
VPY="$VENV/bin/python"

die() { echo "kvpress setup: error: $*" >&2; exit 1; }
say() { echo "kvpress setup: $*"; }

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  die "'$PYTHON -c \"import torch\"' fails: install the main environment first (scripts/install-deps.sh)"
fi

if [ ! -x "$VPY" ]; then
  say "creating the venv $VENV ($PYTHON -m venv --system-site-packages)"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv --system-site-packages "$VENV" \
    || die "'$PYTHON -m venv' failed (Debian's python3-venv package missing?)"
fi

# True when the venv imports the pinned versions, transformers from the venv itself.
check() {
  "$VPY" - "$KVPRESS_VERSION" "$TRANSFORMERS_VERSION" "$VENV" <<'PY' 2>/dev/null
import importlib.metadata as m, os, sys
kv, tf, venv = sys.argv[1:]
import transformers
assert transformers.__version__ == tf, transformers.__version__
assert os.path.realpath(transformers.__file__).startswith(os.path.realpath(venv)), transformers.__file__
assert m.version("kvpress") == kv
import kvpress  # noqa: F401  (imports transformers' model classes and patches attention)
import torch  # noqa: F401
PY
}

if check; then
  say "already set up in $VENV (kvpress==$KVPRESS_VERSION, transformers==$TRANSFORMERS_VERSION)"
  exit 0
fi

say "pip install kvpress==$KVPRESS_VERSION transformers==$TRANSFORMERS_VERSION ${EXTRA_PINS[*]} into $VENV"
# pip installs transformers (and tokenizers, huggingface_hub) into the venv even though the
# main environment has other versions: it never touches packages outside the venv.
"$VPY" -m pip install -q --disable-pip-version-check \
    "kvpress==$KVPRESS_VERSION" "transformers==$TRANSFORMERS_VERSION" "${EXTRA_PINS[@]}" \
  || die "pip install failed (see above)"

if ! check; then
  echo "kvpress setup: the check inside the venv fails; what it says:" >&2
  "$VPY" -c "import transformers, kvpress; print('transformers', transformers.__version__, transformers.__file__)" >&2 || true
  die "the venv $VENV does not import kvpress==$KVPRESS_VERSION with transformers==$TRANSFORMERS_VERSION from the venv"
fi
"$VPY" -c "import torch, transformers, kvpress, importlib.metadata as m; print('kvpress setup: ready:', '$VPY', '| torch', torch.__version__, '| transformers', transformers.__version__, '| kvpress', m.version('kvpress'))"
