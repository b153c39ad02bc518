# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "SNAPKV"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.snapkv_obj_root, "test")
# Models/ holds fixtures (inputs of other tests), not tests.
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Models", "Inputs"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%snapkv_src_root", config.snapkv_src_root))
config.substitutions.append(("%snapkv_obj_root", config.snapkv_obj_root))
config.substitutions.append(
    ("%snapkv_plugin", os.path.join(config.snapkv_obj_root, "lib", "snapkv-plugin.so"))
)
config.substitutions.append(
    ("%mlir_runner_utils", os.path.join(config.llvm_lib_dir, "libmlir_runner_utils.so"))
)
config.substitutions.append(
    ("%mlir_c_runner_utils", os.path.join(config.llvm_lib_dir, "libmlir_c_runner_utils.so"))
)
# A refused model rewrite leaves every function unchanged and records why in the
# module attribute snapkv.refusal; tests that diff against the input drop it first.
config.substitutions.append(
    ("%strip_refusal",
     r"sed -e 's/snapkv\.refusal = {[^}]*}, //' -e 's/ attributes {snapkv\.refusal = {[^}]*}}//'")
)
# --snapkv-cpu-pipeline runs its parallel loops through OpenMP (libomp-22-dev).
config.substitutions.append(("%openmp_runtime", os.path.join(config.llvm_lib_dir, "libomp.so")))

# Sanitized builds: our shared objects need the ASan runtime, which Debian's
# (uninstrumented) mlir-opt does not load.
if config.snapkv_sanitizers.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("asan")

# Strict runs (`make test`, SNAPKV_STRICT_SKIPS=1) fail instead of leaving a test
# unsupported for a missing tool; only a missing GPU device is allowed.
strict = os.environ.get("SNAPKV_STRICT_SKIPS", "") not in ("", "0")

# GPU: `ptxas` (compile-only tests: gpu-module-to-binary assembles the PTX and
# links libdevice) where a CUDA toolkit is found: $CUDA_ROOT, $CUDA_HOME,
# /usr/local/cuda, or the ptxas/libdevice wheels that scripts/install-deps.sh
# installs where neither is there; `cuda-device` (execution tests) only where
# the driver library and a GPU exist, which these CI machines lack.
def _cuda_root():
    for var in ("CUDA_ROOT", "CUDA_HOME"):
        if os.environ.get(var):
            return os.environ[var]
    wheels = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "snapkv", "cuda-wheels", "nvidia", "cu13")
    for root in ("/usr/local/cuda", wheels):
        if os.path.isfile(os.path.join(root, "bin", "ptxas")):
            return root
    return "/usr/local/cuda"


cuda_root = _cuda_root()
if os.path.isfile(os.path.join(cuda_root, "bin", "ptxas")):
    config.available_features.add("ptxas")
    # lit scrubs the environment; gpu-module-to-binary looks here for ptxas.
    config.environment["CUDA_ROOT"] = cuda_root
    config.environment["PATH"] = (os.path.join(cuda_root, "bin") + os.pathsep
                                  + config.environment.get("PATH", ""))
elif strict:
    lit_config.fatal(f"no ptxas in {cuda_root}/bin: Integration/GPU/compile.mlir needs the CUDA "
                     "toolkit's ptxas and libdevice (run scripts/install-deps.sh, or set "
                     "CUDA_ROOT to a CUDA 13 toolkit)")
runtime = os.path.join(config.snapkv_obj_root, "lib", "libsnapkv_cuda_runtime.so")
config.substitutions.append(("%snapkv_cuda_runtime", runtime))


def _has_cuda_device():
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return (cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
            and count.value > 0)


if os.path.isfile(runtime) and _has_cuda_device():
    config.available_features.add("cuda-device")

# AVX512_BF16 (vdpbf16ps): only the test that executes the bf16 microkernel
# needs it (the CPUs CI runs on have it); the others force either path.
def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].split() for line in f
                         if line.startswith("flags")), [])
    except OSError:
        return []


if "avx512_bf16" in _cpu_flags():
    config.available_features.add("avx512bf16")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.snapkv_tools_dir, config.llvm_tools_dir]
tools = ["snapkv-opt", "snapkv-translate", "snapkv-unittests", "mlir-runner", "mlir-opt",
         "mlir-translate", "llvm-dis"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
