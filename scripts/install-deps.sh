#!/usr/bin/env bash
# Installs what the build and the tests need, only if it is missing:
# Debian's LLVM/MLIR 22 toolchain (apt) and the Python packages (pip).
set -euo pipefail

apt_packages=(llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22
              lld-22 libclang-rt-22-dev ninja-build ccache cmake)
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
# The snapkv Python package (reference, drivers, demo), editable.
if ! "$PYTHON" -c "import snapkv.reference" 2>/dev/null; then
  echo "install-deps: pip install -e python"
  "$PYTHON" -m pip install -q -e "$(dirname "$0")/../python"
fi
