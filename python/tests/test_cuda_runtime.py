"""lib/Runtime (the mgpu* entry points of compiled GPU modules) never kills its caller: a
failing driver call is kept for snapkv_cuda_error(), and every later entry point returns
at once. Checked without a GPU through the CUDA toolkit's driver stub, whose every call
fails (CUDA_ERROR_STUB_LIBRARY), in a subprocess so that an abort shows as a signal."""
import os
import subprocess
import sys
from pathlib import Path

from snapkv import tools

RUNTIME = Path(__file__).resolve().parents[2] / "build" / "lib" / "libsnapkv_cuda_runtime.so"
STUB = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64" / "stubs" / "libcuda.so"

PROGRAM = r"""
import ctypes, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # provides libcuda.so.1
rt = ctypes.CDLL(sys.argv[2])
rt.snapkv_cuda_error.restype = ctypes.c_char_p
for name in ("mgpuStreamCreate", "mgpuMemAlloc", "mgpuModuleLoad", "mgpuEventCreate"):
    getattr(rt, name).restype = ctypes.c_void_p
assert rt.snapkv_cuda_error() is None
assert rt.mgpuStreamCreate() is None
first = rt.snapkv_cuda_error().decode()
print("error:", first)
# Everything after the failure returns without touching the driver, null handles included.
assert rt.mgpuMemAlloc(ctypes.c_uint64(1024), None, ctypes.c_bool(False)) is None
assert rt.mgpuModuleLoad(None, ctypes.c_size_t(0)) is None
assert rt.mgpuEventCreate() is None
rt.mgpuLaunchKernel(None, *[ctypes.c_ssize_t(1)] * 6, ctypes.c_int32(65536), None, None,
                    None, ctypes.c_size_t(0))
rt.mgpuMemcpy(None, None, ctypes.c_size_t(64), None)
rt.mgpuMemFree(None, None)
rt.mgpuStreamSynchronize(None)
rt.mgpuStreamDestroy(None)
rt.mgpuModuleUnload(None)
assert rt.snapkv_cuda_error().decode() == first, "the first failure is kept"
rt.snapkv_cuda_clear_error()
assert rt.snapkv_cuda_error() is None
# Cleared, the next call talks to the driver again (and fails again, on the stub).
assert rt.mgpuEventCreate() is None and rt.snapkv_cuda_error() is not None
print("survived")
"""


def test_failing_driver_calls_are_reported_not_fatal():
    assert RUNTIME.exists(), f"{RUNTIME} is not built (CMake did not find the CUDA toolkit)"
    assert STUB.exists(), f"no CUDA driver stub at {STUB}"
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(STUB), str(RUNTIME)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # 34: CUDA_ERROR_STUB_LIBRARY (the stub cannot name it).
    assert "error: cuInit(0) failed: CUresult 34" in proc.stdout, proc.stdout
    assert "survived" in proc.stdout


# A select compiled by --snapkv-gpu-pipeline{asserts=report}: a failed run-time check of its
# host code (here L = 2 < W = 4) returns to the caller with the message in
# snapkv_last_error() instead of aborting. On the driver stub the module load has already
# failed too (kept by the runtime), which must not hide the check's message.
SELECT = """
func.func @short_prompt(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x?x16xf32>,
                        %v: tensor<1x2x?x16xf32>)
    -> (tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?xi64>)
    attributes {llvm.emit_c_interface} {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3 gqa mean
      : (tensor<1x4x4x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>)
      -> (tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?xi64>
}
"""

CALLER = r"""
import ctypes, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # provides libcuda.so.1
rt = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[3])


def desc(rank):
    class Desc(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                    ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                    ("strides", ctypes.c_int64 * rank)]
    return Desc


class Results(ctypes.Structure):
    _fields_ = [("keys", desc(4)), ("values", desc(4)), ("indices", desc(3))]


def tensor(shape):
    buf = (ctypes.c_float * (shape[0] * shape[1] * shape[2] * shape[3]))()
    strides = [shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1]
    d = desc(4)(ctypes.cast(buf, ctypes.c_void_p), ctypes.cast(buf, ctypes.c_void_p), 0,
                (ctypes.c_int64 * 4)(*shape), (ctypes.c_int64 * 4)(*strides))
    return buf, d


q, k, v = tensor([1, 4, 4, 16]), tensor([1, 2, 2, 16]), tensor([1, 2, 2, 16])
out = Results()
lib.snapkv_last_error.restype = ctypes.c_char_p
rt.snapkv_cuda_error.restype = ctypes.c_char_p
lib._mlir_ciface_short_prompt(ctypes.byref(out), ctypes.byref(q[1]), ctypes.byref(k[1]),
                        ctypes.byref(v[1]))
print("check:", lib.snapkv_last_error().decode())
print("driver:", rt.snapkv_cuda_error().decode())
print("survived")
"""


def test_failed_check_of_a_gpu_select_is_reported_not_fatal(tmp_path):
    assert RUNTIME.exists(), f"{RUNTIME} is not built (CMake did not find the CUDA toolkit)"
    assert STUB.exists(), f"no CUDA driver stub at {STUB}"
    source, lowered = tmp_path / "select.mlir", tmp_path / "select.ll"
    library = tmp_path / "select.so"
    source.write_text(SELECT)
    opt = subprocess.run(
        [str(tools.snapkv_opt()), str(source),
         "--snapkv-gpu-pipeline=chip=sm_80 features=+ptx80 format=isa asserts=report"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    subprocess.run([str(tools.mlir_translate()), "--mlir-to-llvmir", "-o", str(lowered)],
                   input=opt, text=True, timeout=300, check=True)
    assert "@abort" not in lowered.read_text()
    libdir = tools.llvm_lib_dir()  # memrefCopy, for the results' dynamic layouts
    subprocess.run([str(tools.clang()), "-shared", "-fPIC", "-Wno-override-module", "-O1",
                    str(lowered), "-o", str(library), str(RUNTIME), f"-L{libdir}",
                    "-lmlir_c_runner_utils", f"-Wl,-rpath,{libdir}"], check=True, timeout=300)
    proc = subprocess.run([sys.executable, "-c", CALLER, str(STUB), str(RUNTIME), str(library)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("check: snapkv.select: prompt length (keys dim 2) is shorter than window 4"
            in proc.stdout), proc.stdout
    assert "driver: " in proc.stdout and "survived" in proc.stdout
