#!/usr/bin/env bash
# Builds, here (snapkv-opt, iree-compile, clang; no GPU needed), what run_device.sh's model
# part runs on the GPU machine, which has Python 3.12, torch and transformers but no MLIR, no
# IREE and no network (docs/gpu.md, "The whole model through IREE"):
#
#   $OUT/cuda-{snapkv,full}.vmfb + .json      models/retrieval-llama, SnapKV and the full-cache
#                                             original, compiled for CUDA (sm_80 PTX) with
#                                             `snapkv compile --device cuda`, and manifests
#   $OUT/iree-cpu-{snapkv,full}.vmfb + .json  the same for IREE's llvm-cpu (the stand-in)
#   $OUT/smollm2-*                            the same for SmolLM2-135M's architecture with
#                                             weights drawn from a seed (540 MB: written,
#                                             not carried; the GPU machine writes them too)
#   $OUT/expected.json, smollm2-expected.json the CPU pipeline's tokens and logits for the
#                                             check prompts (model_check.py --expect)
#   $OUT/wheels/iree_base_runtime-*.whl       the IREE runtime for CPython 3.12 (pip download)
#
#   bash benchmarks/gpu/build_model.sh   # OUT=build/gpu-model: about 6 MB + the 15 MB wheel;
#                                        # 10-15 minutes on 2 busy cores (SETS=retrieval: 2)
#
# NO_WHEEL=1 skips the download (the stand-in uses this machine's iree.runtime).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-build/gpu-model}
PY=${PYTHON:-python3}
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
MODEL=models/retrieval-llama
# The retrieval task keeps its question inside the last 16 positions (docs/eval.md); C = 256
# is L/8 at L = 2048 and L/16 at 4096.
COMPACTION=(--window 16 --capacity 256)
# SmolLM2-135M's architecture with weights drawn from a seed (model_check.py writes the same
# checkpoint on the GPU machine): the pass's defaults but C = 512.
SCRATCH=${SCRATCH:-/tmp/snapkv-model-check}
SMOLLM2_COMPACTION=(--window 32 --capacity 512)
SETS=${SETS:-retrieval smollm2-random}

mkdir -p "$OUT"
for name in $SETS; do
  case $name in
    retrieval) source=$MODEL prefix= compaction=("${COMPACTION[@]}") lengths=512,2048,4096 ;;
    smollm2-random)
      source=$($PY benchmarks/gpu/model_check.py --scratch "$SCRATCH" --write-random-checkpoint)
      prefix=smollm2- compaction=("${SMOLLM2_COMPACTION[@]}") lengths=1024,2048 ;;
    *) echo "unknown set $name (retrieval, smollm2-random)"; exit 2 ;;
  esac
  for device in cuda iree-cpu; do
    $PY -m snapkv.cli compile "$source" -o "$OUT/$prefix$device-snapkv.vmfb" --device "$device" \
      "${compaction[@]}"
    $PY -m snapkv.cli compile "$source" -o "$OUT/$prefix$device-full.vmfb" --device "$device" \
      --full-cache
  done
  $PY benchmarks/gpu/model_check.py --models "$OUT" --sets "$name" --scratch "$SCRATCH" \
    --expect "$lengths"
done
if [[ -z ${NO_WHEEL:-} ]] && ! ls "$OUT"/wheels/iree_base_runtime-3.13.0-cp312-*.whl >/dev/null 2>&1; then
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$OUT/wheels" iree-base-runtime==3.13.0
fi
du -sh "$OUT"
