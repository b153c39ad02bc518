"""lib/Runtime (the mgpu* entry points of compiled GPU modules) never kills its caller: a
failing driver call is kept for snapkv_cuda_error(), and every later entry point returns
at once. Checked without a GPU through the CUDA toolkit's driver stub, whose every call
fails (CUDA_ERROR_STUB_LIBRARY), in a subprocess so that an abort shows as a signal."""
import os
import subprocess
import sys
from pathlib import Path

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
