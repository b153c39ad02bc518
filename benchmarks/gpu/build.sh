#!/usr/bin/env bash
# Builds the GPU benchmark HERE (a machine with LLVM/MLIR 22 and the CUDA toolkit, no GPU
# needed) into build/gpu-bench/, which is what travels to the GPU machine:
#
#   snapkv-gpu-bench   benchmarks/gpu/select.mlir through
#                      snapkv-opt --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=fatbin"
#                      -> mlir-translate-22 --mlir-to-llvmir -> clang-22 -c -O2, plus harness.cpp,
#                      linked statically with build/lib/libsnapkv_cuda_runtime.a and dynamically
#                      with libcuda.so.1 (+ libc, libm, libstdc++, libgcc_s: nothing from LLVM).
#   snapkv-cpu-emul    the same MLIR through --snapkv-gpu-emulation
#                      --snapkv-cpu-pipeline (the same kernel loops on the CPU) and the same
#                      harness: tests the harness and device_check.py without a GPU.
#
# Also kept there for a relink on the GPU machine (run_device.sh does it if the prebuilt
# executable does not start): select.gpu.o, libsnapkv_cuda_runtime.a, configs.inc.
# Intermediate MLIR/LLVM IR goes to build/gpu-bench-work/ (not carried).
#
# Needs: build/bin/snapkv-opt and build/lib/libsnapkv_cuda_runtime.a (the project's normal
# build), mlir-translate-22, clang-22/clang++-22, /usr/local/cuda (headers, driver stub).
# Environment: JOBS (default 1) compiles the two variants in parallel when 2.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
OUT=build/gpu-bench
WORK=build/gpu-bench-work
CUDA=${CUDA_HOME:-/usr/local/cuda}
SNAPKV_OPT=${SNAPKV_OPT:-build/bin/snapkv-opt}
TRANSLATE=${MLIR_TRANSLATE:-mlir-translate-22}
CC=${CLANG:-clang-22}
CXX=${CLANGXX:-clang++-22}
CHIP=${CHIP:-sm_90}
PIPELINE="chip=$CHIP features=+ptx80 format=fatbin asserts=report"
RUNTIME=build/lib/libsnapkv_cuda_runtime.a

for tool in "$SNAPKV_OPT" "$RUNTIME" "$CUDA/include/cuda.h" "$CUDA/lib64/stubs/libcuda.so"; do
  [[ -e $tool ]] || { echo "build.sh: missing $tool (build the project first)" >&2; exit 1; }
done
for tool in "$TRANSLATE" "$CC" "$CXX"; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not on PATH" >&2; exit 1; }
done

mkdir -p "$OUT" "$WORK"
step() { printf '== %s\n' "$*"; }

step "configs -> benchmarks/gpu/select.mlir, $OUT/configs.inc"
python3 benchmarks/gpu/configs.py --mlir benchmarks/gpu/select.mlir --inc "$OUT/configs.inc"

step "GPU: snapkv-opt --snapkv-gpu-pipeline=\"$PIPELINE\""
"$SNAPKV_OPT" benchmarks/gpu/select.mlir --snapkv-gpu-pipeline="$PIPELINE" -o "$WORK/select.gpu.mlir"
"$TRANSLATE" --mlir-to-llvmir "$WORK/select.gpu.mlir" -o "$WORK/select.gpu.ll"
"$CC" -c -O2 -fPIE -Wno-override-module "$WORK/select.gpu.ll" -o "$OUT/select.gpu.o"

step "CPU emulation: --snapkv-gpu-emulation --snapkv-cpu-pipeline"
"$SNAPKV_OPT" benchmarks/gpu/select.mlir --snapkv-gpu-emulation \
  --snapkv-cpu-pipeline="asserts=report" -o "$WORK/select.cpu.mlir"
"$TRANSLATE" --mlir-to-llvmir "$WORK/select.cpu.mlir" -o "$WORK/select.cpu.ll"
"$CC" -c -O2 -fPIE -Wno-override-module "$WORK/select.cpu.ll" -o "$OUT/select.cpu.o"

step "harness + link"
CXXFLAGS=(-std=c++17 -O2 -Wall -Wextra -Wno-unused-parameter -I"$OUT")
"$CXX" "${CXXFLAGS[@]}" -DSNAPKV_GPU -I"$CUDA/include" -c benchmarks/gpu/harness.cpp \
  -o "$WORK/harness.gpu.o"
"$CXX" "${CXXFLAGS[@]}" -c benchmarks/gpu/harness.cpp -o "$WORK/harness.cpu.o"
# --wrap routes the generated code's mgpuLaunchKernel calls through the harness
# (CUDA events around each kernel for `time`); --as-needed keeps NEEDED minimal.
"$CXX" -O2 -Wl,--as-needed -Wl,--wrap=mgpuLaunchKernel \
  "$WORK/harness.gpu.o" "$OUT/select.gpu.o" "$RUNTIME" \
  -L"$CUDA/lib64/stubs" -lcuda -lm -o "$OUT/snapkv-gpu-bench"
# The emulation's block and thread loops run as OpenMP parallel loops.
OMP_DIR=${OMP_DIR:-/usr/lib/llvm-22/lib}
"$CXX" -O2 -Wl,--as-needed \
  "$WORK/harness.cpu.o" "$OUT/select.cpu.o" -L"$OMP_DIR" -lomp -Wl,-rpath,"$OMP_DIR" \
  -lm -o "$OUT/snapkv-cpu-emul"
cp "$RUNTIME" "$OUT/"

step "checks"
fail=0
for exe in snapkv-gpu-bench snapkv-cpu-emul; do
  needed=$(readelf -d "$OUT/$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  echo "$exe NEEDED: $needed"
  for lib in $needed; do
    case $lib in
      libc.so.6|libm.so.6|libstdc++.so.6|libgcc_s.so.1|ld-linux-x86-64.so.2) ;;
      libcuda.so.1) [[ $exe == snapkv-gpu-bench ]] || { echo "  unexpected $lib"; fail=1; } ;;
      libomp.so.5) [[ $exe == snapkv-cpu-emul ]] || { echo "  unexpected $lib"; fail=1; } ;;
      *) echo "  unexpected $lib"; fail=1 ;;
    esac
  done
  glibc=$(objdump -T "$OUT/$exe" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "$exe newest glibc symbol version: ${glibc:-none}"
  objdump -T "$OUT/$exe" | grep -o 'GLIBCXX_[0-9.]*\|CXXABI_[0-9.]*' | sort -uV | tail -2 \
    | sed "s/^/$exe needs /"
  # Strong undefined symbols without a version must come from libcuda (the stub has none).
  undef=$(nm -D --undefined-only "$OUT/$exe" | awk '$1 == "U" && $2 !~ /@/ && $2 !~ /^(cu|__kmpc_|omp_)/ {print $2}')
  [[ -z $undef ]] || { echo "  unexpected undefined symbols: $undef"; fail=1; }
done
"$OUT/snapkv-cpu-emul" list >/dev/null
cmp <("$OUT/snapkv-cpu-emul" list) <(python3 - <<'EOF'
import sys
sys.path.insert(0, "benchmarks/gpu")
from configs import CONFIGS
for c in CONFIGS:
    print(f"{c.name} {c.elem} B={c.batch} Hq={c.q_heads} Hkv={c.kv_heads} D={c.dim} "
          f"W={c.window} C={c.capacity} kernel={c.kernel} pooling={c.pooling} gqa={c.gqa} "
          f"order={c.order} scale={0 if c.scale is None else format(c.scale, 'g')}")
EOF
) || { echo "config table of the executable differs from configs.py"; fail=1; }
# A rejected input (s_f32_expand_k5 with L = 3 < W = 4) is reported, not fatal: exit
# status 4 and the check's message.
head -c $((4 * 4 * 4 * 16)) /dev/zero >"$WORK/short.q.bin"
head -c $((4 * 2 * 3 * 16)) /dev/zero >"$WORK/short.k.bin"
cp "$WORK/short.k.bin" "$WORK/short.v.bin"
rc=0
"$OUT/snapkv-cpu-emul" run s_f32_expand_k5 "$WORK/short.q.bin" "$WORK/short.k.bin" \
  "$WORK/short.v.bin" "$WORK/short" 2>"$WORK/short.err" >/dev/null || rc=$?
if [[ $rc != 4 ]] || ! grep -q "rejected its input: snapkv.select: prompt length (keys dim 2) is shorter than window 4" "$WORK/short.err"; then
  echo "a rejected input: exit status $rc, $(cat "$WORK/short.err")"; fail=1
fi
echo "kernels embedded: $(grep -c 'gpu.binary @' "$WORK/select.gpu.mlir")"
du -sh "$OUT"
exit $fail
