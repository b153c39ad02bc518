#!/usr/bin/env bash
# The ONE script to run on the GPU machine (H200, CUDA 13 driver, Python 3.12 + torch, no
# LLVM/MLIR): correctness of the compiled selects against the numpy reference, then timing
# against PyTorch eager / torch.compile and the bandwidth table (device_check.py).
#
#   bash benchmarks/gpu/run_device.sh [extra device_check.py arguments]
#
# Needs build/gpu-bench/ from `bash benchmarks/gpu/build.sh` (carry it: it is ignored by git).
# Output goes to stdout and, when $OUT is set, to $OUT/device_report.md (the report) and
# $OUT/run_device.log (everything). Meant to finish in well under 8 minutes: device_check.py
# skips later parts past its --budget (default here 330 s) and is stopped at 420 s.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/run_device.log") 2>&1
fi
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
BENCH=build/gpu-bench
EXE=$BENCH/snapkv-gpu-bench

echo "== machine"
date -u +%FT%TZ
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv 2>&1 | head -3
$PY -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
ldd --version 2>&1 | head -1

if [[ ! -x $EXE ]]; then
  echo "missing $EXE: run 'bash benchmarks/gpu/build.sh' where LLVM/MLIR 22 is installed and"
  echo "carry build/gpu-bench to this machine"
  exit 2
fi

echo "== does the prebuilt harness start?"
if ! timeout 120 "$EXE" info; then
  ldd "$EXE" 2>&1 | sed 's/^/  /'
  # libcuda.so.1 outside the loader's path (a driver mount)?
  for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu \
             /usr/lib64 /usr/local/cuda/compat; do
    if [[ -e $dir/libcuda.so.1 ]]; then
      export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "retrying with LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
      break
    fi
  done
  if ! timeout 120 "$EXE" info; then
    # Relink here from the carried objects (other system libraries than where it was built).
    echo "relinking the harness on this machine"
    RELINKED=/tmp/snapkv-gpu-bench
    CUDA=${CUDA_HOME:-/usr/local/cuda}
    ${CXX:-c++} -std=c++17 -O2 -DSNAPKV_GPU -I"$BENCH" -I"$CUDA/include" \
      benchmarks/gpu/harness.cpp "$BENCH/select.gpu.o" "$BENCH/libsnapkv_cuda_runtime.a" \
      -L"$CUDA/lib64/stubs" -L"$CUDA/lib64" -lcuda -lm -Wl,--wrap=mgpuLaunchKernel \
      -o "$RELINKED" && timeout 120 "$RELINKED" info && EXE=$RELINKED || {
        echo "the harness does not run here; running the torch baselines only"
        EXE=
      }
  fi
fi

echo "== device_check.py"
ARGS=(--budget "${BUDGET:-330}")
if [[ -n $EXE ]]; then
  ARGS+=(--exe "$EXE")
else
  ARGS+=(--skip-correctness --exe /bin/false)
fi
timeout --signal=INT --kill-after=20 "${LIMIT:-420}" $PY benchmarks/gpu/device_check.py \
  "${ARGS[@]}" "$@"
rc=$?
echo "== device_check.py exit status $rc (124/130: stopped at the time limit)"
exit $rc
