#!/usr/bin/env bash
# Installs what the build and the tests need, only if it is missing:
# Debian's LLVM/MLIR 22 toolchain (apt) and the Python packages (pip).
set -euo pipefail

apt_packages=(llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22
              clang-format-22 lld-22 libclang-rt-22-dev ninja-build ccache cmake)
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
if ! "$PYTHON" -c "import snapkv.cli" 2>/dev/null || ! has_cli; then
  echo "install-deps: pip install -e python"
  "$PYTHON" -m pip install -q -e "$(dirname "$0")/../python"
fi
