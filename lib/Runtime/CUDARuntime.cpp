//===- CUDARuntime.cpp - mgpu* entry points on the CUDA driver API --------===//
//
// The functions LLVM 22's gpu-to-llvm lowering and the NVVM offloading
// translation call from host code (module load, kernel launch, streams,
// device memory). Debian ships no libmlir_cuda_runtime.so, so compiled GPU
// modules link this instead: as a shared library for `mlir-runner
// --shared-libs`, or statically into ahead-of-time executables, which then
// need only the driver (libcuda.so.1) at run time.
//
// A failing driver call cannot be handed back to the generated code (the
// entry points return nothing or a handle), so it is reported with the
// driver's error name and the process aborts.
//
//===----------------------------------------------------------------------===//

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define SNAPKV_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

void check(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS)
    return;
  const char *name = "unknown";
  const char *text = "";
  cuGetErrorName(result, &name);
  cuGetErrorString(result, &text);
  std::fprintf(stderr, "snapkv CUDA runtime: %s failed: %s (%s)\n", call, name,
               text);
  std::abort();
}

#define CHECK(call) check(call, #call)

int defaultDevice = 0;

/// Makes the device's primary context current on the calling thread (the
/// generated code may call from any thread).
void ensureContext() {
  static thread_local bool ready = false;
  if (ready)
    return;
  CHECK(cuInit(0));
  CUdevice device;
  CHECK(cuDeviceGet(&device, defaultDevice));
  CUcontext context;
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  ready = true;
}

} // namespace

SNAPKV_EXPORT void mgpuSetDefaultDevice(int32_t device) {
  defaultDevice = device;
}

SNAPKV_EXPORT CUmodule mgpuModuleLoad(void *data, size_t /*size*/) {
  ensureContext();
  CUmodule module = nullptr;
  CHECK(cuModuleLoadData(&module, data));
  return module;
}

SNAPKV_EXPORT CUmodule mgpuModuleLoadJIT(void *data, int optLevel) {
  ensureContext();
  CUmodule module = nullptr;
  char log[8192] = {0};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_OPTIMIZATION_LEVEL};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log)),
                    reinterpret_cast<void *>(static_cast<intptr_t>(optLevel))};
  CUresult result = cuModuleLoadDataEx(&module, data, 3, options, values);
  if (result != CUDA_SUCCESS)
    std::fprintf(stderr, "snapkv CUDA runtime: PTX JIT log:\n%s\n", log);
  CHECK(result);
  return module;
}

SNAPKV_EXPORT void mgpuModuleUnload(CUmodule module) {
  CHECK(cuModuleUnload(module));
}

SNAPKV_EXPORT CUfunction mgpuModuleGetFunction(CUmodule module,
                                               const char *name) {
  CUfunction function = nullptr;
  CHECK(cuModuleGetFunction(&function, module, name));
  return function;
}

SNAPKV_EXPORT void mgpuLaunchKernel(CUfunction function, intptr_t gridX,
                                    intptr_t gridY, intptr_t gridZ,
                                    intptr_t blockX, intptr_t blockY,
                                    intptr_t blockZ, int32_t sharedBytes,
                                    CUstream stream, void **params,
                                    void **extra, size_t /*paramCount*/) {
  ensureContext();
  if (sharedBytes > 48 * 1024)
    CHECK(cuFuncSetAttribute(function,
                             CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             sharedBytes));
  CHECK(cuLaunchKernel(function, gridX, gridY, gridZ, blockX, blockY, blockZ,
                       sharedBytes, stream, params, extra));
}

SNAPKV_EXPORT CUstream mgpuStreamCreate() {
  ensureContext();
  CUstream stream = nullptr;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  return stream;
}

SNAPKV_EXPORT void mgpuStreamDestroy(CUstream stream) {
  CHECK(cuStreamDestroy(stream));
}

SNAPKV_EXPORT void mgpuStreamSynchronize(CUstream stream) {
  CHECK(cuStreamSynchronize(stream));
}

SNAPKV_EXPORT void mgpuStreamWaitEvent(CUstream stream, CUevent event) {
  CHECK(cuStreamWaitEvent(stream, event, 0));
}

SNAPKV_EXPORT CUevent mgpuEventCreate() {
  ensureContext();
  CUevent event = nullptr;
  CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  return event;
}

SNAPKV_EXPORT void mgpuEventDestroy(CUevent event) {
  CHECK(cuEventDestroy(event));
}

SNAPKV_EXPORT void mgpuEventSynchronize(CUevent event) {
  CHECK(cuEventSynchronize(event));
}

SNAPKV_EXPORT void mgpuEventRecord(CUevent event, CUstream stream) {
  CHECK(cuEventRecord(event, stream));
}

// Stream-ordered allocation: a buffer freed after the kernels that use it
// are queued is not released before they finish.
SNAPKV_EXPORT void *mgpuMemAlloc(uint64_t bytes, CUstream stream,
                                 bool hostShared) {
  ensureContext();
  if (bytes == 0)
    return nullptr;
  CUdeviceptr pointer = 0;
  if (hostShared)
    CHECK(cuMemAllocManaged(&pointer, bytes, CU_MEM_ATTACH_GLOBAL));
  else
    CHECK(cuMemAllocAsync(&pointer, bytes, stream));
  return reinterpret_cast<void *>(pointer);
}

SNAPKV_EXPORT void mgpuMemFree(void *pointer, CUstream stream) {
  if (!pointer)
    return;
  CHECK(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(pointer), stream));
}

// Unified addressing: one call copies host<->device and device<->device.
SNAPKV_EXPORT void mgpuMemcpy(void *dst, void *src, size_t bytes,
                              CUstream stream) {
  if (bytes == 0)
    return;
  CHECK(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                      reinterpret_cast<CUdeviceptr>(src), bytes, stream));
}

SNAPKV_EXPORT void mgpuMemset32(void *dst, uint32_t value, size_t count,
                                CUstream stream) {
  CHECK(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(dst), value, count,
                         stream));
}

SNAPKV_EXPORT void mgpuMemset16(void *dst, uint16_t value, size_t count,
                                CUstream stream) {
  CHECK(cuMemsetD16Async(reinterpret_cast<CUdeviceptr>(dst), value, count,
                         stream));
}
