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
// entry points return nothing or a handle), and aborting would take the
// caller's process with it. So the first failure is kept (the call, the
// driver's error name and text) and from then on every entry point returns
// at once without touching the device (null handles): the compiled function
// runs to its end, its results undefined, and the caller asks
// snapkv_cuda_error() afterwards.
//
//===----------------------------------------------------------------------===//

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#define SNAPKV_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<bool> failed{false};
std::mutex messageMutex;
char message[4096];

/// Keeps the first failure; later ones (usually its consequences) are dropped.
void fail(const char *call, CUresult result, const char *detail = "") {
  std::lock_guard<std::mutex> lock(messageMutex);
  if (failed.load())
    return;
  // The driver stub (and a broken driver) cannot name its own errors.
  char code[32];
  const char *name = nullptr;
  const char *text = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || !name) {
    std::snprintf(code, sizeof(code), "CUresult %d", static_cast<int>(result));
    name = code;
  }
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS || !text)
    text = "no description";
  std::snprintf(message, sizeof(message), "%s failed: %s (%s)%s", call, name,
                text, detail);
  failed.store(true);
}

bool check(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS)
    return true;
  fail(call, result);
  return false;
}

#define CHECK(call) check(call, #call)

int defaultDevice = 0;

/// Makes the device's primary context current on the calling thread (the
/// generated code may call from any thread). False once a call has failed.
bool ensureContext() {
  static thread_local bool ready = false;
  if (failed.load())
    return false;
  if (ready)
    return true;
  CUdevice device;
  CUcontext context;
  if (!CHECK(cuInit(0)) || !CHECK(cuDeviceGet(&device, defaultDevice)) ||
      !CHECK(cuDevicePrimaryCtxRetain(&context, device)) ||
      !CHECK(cuCtxSetCurrent(context)))
    return false;
  ready = true;
  return true;
}

} // namespace

/// The first failed driver call of the process ("cuInit(0) failed: ..."), or
/// null if none failed.
SNAPKV_EXPORT const char *snapkv_cuda_error() {
  return failed.load() ? message : nullptr;
}

/// Forgets the kept failure, so that the entry points talk to the driver
/// again (after an error that leaves the context usable, such as running out
/// of memory).
SNAPKV_EXPORT void snapkv_cuda_clear_error() {
  std::lock_guard<std::mutex> lock(messageMutex);
  failed.store(false);
  message[0] = 0;
}

SNAPKV_EXPORT void mgpuSetDefaultDevice(int32_t device) {
  defaultDevice = device;
}

SNAPKV_EXPORT CUmodule mgpuModuleLoad(void *data, size_t /*size*/) {
  CUmodule module = nullptr;
  if (ensureContext())
    CHECK(cuModuleLoadData(&module, data));
  return module;
}

SNAPKV_EXPORT CUmodule mgpuModuleLoadJIT(void *data, int optLevel) {
  CUmodule module = nullptr;
  if (!ensureContext())
    return module;
  char log[8192] = {0};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_OPTIMIZATION_LEVEL};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log)),
                    reinterpret_cast<void *>(static_cast<intptr_t>(optLevel))};
  CUresult result = cuModuleLoadDataEx(&module, data, 3, options, values);
  if (result != CUDA_SUCCESS) {
    char detail[sizeof(log) + 16];
    std::snprintf(detail, sizeof(detail), "; PTX JIT log:\n%s", log);
    fail("cuModuleLoadDataEx", result, detail);
  }
  return module;
}

SNAPKV_EXPORT void mgpuModuleUnload(CUmodule module) {
  if (module && !failed.load())
    CHECK(cuModuleUnload(module));
}

SNAPKV_EXPORT CUfunction mgpuModuleGetFunction(CUmodule module,
                                               const char *name) {
  CUfunction function = nullptr;
  if (!failed.load())
    CHECK(cuModuleGetFunction(&function, module, name));
  return function;
}

SNAPKV_EXPORT void mgpuLaunchKernel(CUfunction function, intptr_t gridX,
                                    intptr_t gridY, intptr_t gridZ,
                                    intptr_t blockX, intptr_t blockY,
                                    intptr_t blockZ, int32_t sharedBytes,
                                    CUstream stream, void **params,
                                    void **extra, size_t /*paramCount*/) {
  if (!ensureContext())
    return;
  if (sharedBytes > 48 * 1024 &&
      !CHECK(cuFuncSetAttribute(function,
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                sharedBytes)))
    return;
  CHECK(cuLaunchKernel(function, gridX, gridY, gridZ, blockX, blockY, blockZ,
                       sharedBytes, stream, params, extra));
}

SNAPKV_EXPORT CUstream mgpuStreamCreate() {
  CUstream stream = nullptr;
  if (ensureContext())
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  return stream;
}

SNAPKV_EXPORT void mgpuStreamDestroy(CUstream stream) {
  if (stream && !failed.load())
    CHECK(cuStreamDestroy(stream));
}

SNAPKV_EXPORT void mgpuStreamSynchronize(CUstream stream) {
  if (!failed.load())
    CHECK(cuStreamSynchronize(stream));
}

SNAPKV_EXPORT void mgpuStreamWaitEvent(CUstream stream, CUevent event) {
  if (!failed.load())
    CHECK(cuStreamWaitEvent(stream, event, 0));
}

SNAPKV_EXPORT CUevent mgpuEventCreate() {
  CUevent event = nullptr;
  if (ensureContext())
    CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  return event;
}

SNAPKV_EXPORT void mgpuEventDestroy(CUevent event) {
  if (event && !failed.load())
    CHECK(cuEventDestroy(event));
}

SNAPKV_EXPORT void mgpuEventSynchronize(CUevent event) {
  if (!failed.load())
    CHECK(cuEventSynchronize(event));
}

SNAPKV_EXPORT void mgpuEventRecord(CUevent event, CUstream stream) {
  if (!failed.load())
    CHECK(cuEventRecord(event, stream));
}

// Stream-ordered allocation: a buffer freed after the kernels that use it
// are queued is not released before they finish.
SNAPKV_EXPORT void *mgpuMemAlloc(uint64_t bytes, CUstream stream,
                                 bool hostShared) {
  if (bytes == 0 || !ensureContext())
    return nullptr;
  CUdeviceptr pointer = 0;
  if (hostShared)
    CHECK(cuMemAllocManaged(&pointer, bytes, CU_MEM_ATTACH_GLOBAL));
  else
    CHECK(cuMemAllocAsync(&pointer, bytes, stream));
  return reinterpret_cast<void *>(pointer);
}

SNAPKV_EXPORT void mgpuMemFree(void *pointer, CUstream stream) {
  if (!pointer || failed.load())
    return;
  CHECK(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(pointer), stream));
}

// Unified addressing: one call copies host<->device and device<->device.
SNAPKV_EXPORT void mgpuMemcpy(void *dst, void *src, size_t bytes,
                              CUstream stream) {
  if (bytes == 0 || failed.load())
    return;
  CHECK(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                      reinterpret_cast<CUdeviceptr>(src), bytes, stream));
}

SNAPKV_EXPORT void mgpuMemset32(void *dst, uint32_t value, size_t count,
                                CUstream stream) {
  if (!failed.load())
    CHECK(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(dst), value, count,
                           stream));
}

SNAPKV_EXPORT void mgpuMemset16(void *dst, uint16_t value, size_t count,
                                CUstream stream) {
  if (!failed.load())
    CHECK(cuMemsetD16Async(reinterpret_cast<CUdeviceptr>(dst), value, count,
                           stream));
}
