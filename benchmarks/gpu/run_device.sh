#!/usr/bin/env bash
# The ONE script to run on the GPU machine (H100/H200, CUDA 13 driver, Python 3.12 + torch
# and transformers, no LLVM/MLIR, no IREE, no network). Two parts, in this order:
#
#   model   the whole model through IREE (model_check.py): models/retrieval-llama and
#           SmolLM2's architecture with seeded weights, compiled for CUDA by build_model.sh,
#           their greedy tokens against HF transformers and the CPU pipeline's, then prefill
#           and decode (full and SnapKV) timed against HF SDPA and torch.compile;
#   select  the compiled selects against the numpy reference, then timed against PyTorch
#           eager / torch.compile, and the bandwidth table (device_check.py).
#
#   bash benchmarks/gpu/run_device.sh [extra device_check.py arguments]
#
# Needs build/gpu-model/ from `bash benchmarks/gpu/build_model.sh` and build/gpu-bench/ from
# `bash benchmarks/gpu/build.sh` (carry both: they are ignored by git). The IREE runtime is
# installed from build/gpu-model/wheels/ when Python cannot import it.
#
# Environment: PARTS ("model select"; either alone), MODELS (build/gpu-model), MODEL_ARGS
# (more model_check.py arguments), DEVICE (cuda; local-task is the stand-in without a GPU:
# the model part on IREE's llvm-cpu modules with torch on the CPU, the select part skipped),
# BUDGET/LIMIT (the select part's, seconds).
#
# Output goes to stdout and, when $OUT is set, to $OUT/run_device.log (everything),
# $OUT/model_check.json + $OUT/model_report.md (the model part) and $OUT/device_report.md
# (the select part). Sized to finish in under 8 minutes: the model part skips later timing
# lengths past 210 s and stops at 280 s (MODEL_LIMIT), the select part skips later parts past
# its --budget (120 s when the model part ran, else 330 s) and is stopped at 150 s (420 s
# alone).
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
PARTS=" ${PARTS:-model select} "
DEVICE=${DEVICE:-cuda}
MODELS=${MODELS:-build/gpu-model}
BENCH=build/gpu-bench
EXE=$BENCH/snapkv-gpu-bench
status=0

echo "== machine"
date -u +%FT%TZ
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv 2>&1 | head -3
$PY -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
ldd --version 2>&1 | head -1

if [[ $PARTS == *" model "* ]]; then
  echo "== the model through IREE (model_check.py, driver $DEVICE)"
  if ! $PY -c 'import iree.runtime' 2>/dev/null; then
    wheel=$(ls "$MODELS"/wheels/iree_base_runtime-*.whl 2>/dev/null | head -1)
    if [[ -n $wheel ]]; then
      echo "installing $wheel into /tmp/snapkv-site"
      $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/snapkv-site "$wheel" \
        && export PYTHONPATH="$PYTHONPATH:/tmp/snapkv-site"
    fi
  fi
  if [[ $DEVICE == cuda ]]; then
    # IREE's CUDA driver dlopens "libcuda.so" (unversioned), which a machine with only the
    # driver may lack: link it to the libcuda.so.1 the loader (or a driver mount) has.
    libcuda=$($PY -c 'import ctypes; ctypes.CDLL("libcuda.so.1")
print(next((l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l), ""))' \
              2>/dev/null)
    for dir in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
      [[ -z $libcuda && -e $dir/libcuda.so.1 ]] && libcuda=$dir/libcuda.so.1
    done
    if [[ -n $libcuda ]]; then
      mkdir -p /tmp/snapkv-libcuda && ln -sf "$libcuda" /tmp/snapkv-libcuda/libcuda.so
      export LD_LIBRARY_PATH="/tmp/snapkv-libcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "libcuda: $libcuda"
    else
      echo "no libcuda.so.1 found: IREE's CUDA driver will not start"
    fi
  fi
  if [[ ! -f $MODELS/expected.json ]]; then
    echo "missing $MODELS/expected.json: run 'bash benchmarks/gpu/build_model.sh' where MLIR"
    echo "and IREE are installed and carry $MODELS to this machine"
    status=2
  else
    ARGS=(--models "$MODELS" --device "$DEVICE")
    [[ -n ${OUT:-} ]] && ARGS+=(--out "$OUT")
    limit=${MODEL_LIMIT:-280}
    # The stand-in: 2 worker threads, one short length, no torch.compile (minutes on a CPU).
    if [[ $DEVICE != cuda ]]; then
      ARGS+=(--workers 2 --timing-lengths 1024 --timing-steps 8 --repeats 2 --no-compile
             --budget 600)
      limit=${MODEL_LIMIT:-900}
    fi
    # shellcheck disable=SC2086
    timeout --signal=INT --kill-after=20 "$limit" $PY benchmarks/gpu/model_check.py \
      "${ARGS[@]}" ${MODEL_ARGS:-}
    rc=$?
    echo "== model_check.py exit status $rc (1: a FAIL; 3: IREE or torch did not start; 124/130: stopped at the time limit)"
    [[ $rc != 0 ]] && status=$rc
  fi
fi

if [[ $PARTS == *" select "* ]]; then
  if [[ $DEVICE != cuda ]]; then
    echo "== select part skipped: it needs a GPU (without one: python3"
    echo "   benchmarks/gpu/device_check.py --emulation, see benchmarks/gpu/README.md)"
    exit $status
  fi
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
  if [[ $PARTS == *" model "* ]]; then
    budget=${BUDGET:-120} limit=${LIMIT:-150}
  else
    budget=${BUDGET:-330} limit=${LIMIT:-420}
  fi
  ARGS=(--budget "$budget")
  if [[ -n $EXE ]]; then
    ARGS+=(--exe "$EXE")
  else
    ARGS+=(--skip-correctness --exe /bin/false)
  fi
  timeout --signal=INT --kill-after=20 "$limit" $PY benchmarks/gpu/device_check.py \
    "${ARGS[@]}" "$@"
  rc=$?
  echo "== device_check.py exit status $rc (124/130: stopped at the time limit)"
  [[ $rc != 0 ]] && status=$rc
fi
exit $status
