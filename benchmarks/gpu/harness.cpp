//===- harness.cpp - driver for the compiled GPU selects ------------------===//
//
// Links against the object compiled from benchmarks/gpu/select.mlir (one
// `_mlir_ciface_<config>` function per config of configs.py) and calls it.
//
// Built twice by build.sh from the same MLIR:
//   * SNAPKV_GPU defined: `snapkv-gpu-bench`, the selects lowered with
//     --snapkv-gpu-pipeline (NVVM kernels + host code calling mgpu*), linked
//     statically with libsnapkv_cuda_runtime.a and dynamically with
//     libcuda.so.1 only;
//   * not defined: `snapkv-cpu-emul`, the same kernel loops lowered for the
//     CPU (--snapkv-gpu-emulation + --snapkv-cpu-pipeline),
//     which tests this harness and device_check.py without a GPU.
//
// Commands:
//   list                                  the configs, one per line
//   info                                  device (or "cpu-emulation")
//   run CONFIG q.bin k.bin v.bin PREFIX [--device-inputs]
//   batch MANIFEST                        many runs in one process; each line
//                                         "CONFIG q.bin k.bin v.bin PREFIX [device]"
//   time CONFIG L REPEATS [--warmup N] [--max-seconds S] [--seed N] [--no-extra]
//
// Input files are raw little-endian arrays in row-major order: q [B,Hq,W,D],
// k and v [B,Hkv,L,D] of the config's element type (bf16 as its 16-bit
// pattern); L is the size of k.bin divided by B*Hkv*D*elementBytes. `run`
// writes PREFIX.idx.bin (int64 [B,Hc,S]), PREFIX.keys.bin and
// PREFIX.values.bin ([B,Hc,S,D], element type), S = min(L, C), and prints
// "RUN name L S Hc ms". --device-inputs copies the inputs to device memory
// first (the generated code then copies device-to-device).
//
// `time` fills q/k/v in DEVICE memory (host-generated random values, one
// cuMemcpyHtoD each) and times each call of the compiled function with a wall
// clock. The generated code synchronizes its streams before it returns, so a
// call's time covers: stream creation, its own stream-ordered device
// allocations (cuMemAllocAsync) and frees, the device-to-device copies of
// q/k/v, the 2 kernels, and the device-to-host copies of the results into
// malloc'ed host buffers (freed by the harness outside the timed region).
// With a GPU it also reports (a) each kernel's GPU time, from CUDA events
// recorded around every mgpuLaunchKernel (the link wraps that symbol:
// -Wl,--wrap=mgpuLaunchKernel), in separate runs, and (b) the wall time again
// after setting the default memory pool's release threshold to UINT64_MAX, so
// that freed device memory stays mapped between calls. The last line is
// "RESULT {json}".
//
// The process ends with _exit() after flushing its output: the compiled module
// unloads its CUDA modules in global destructors, which would run after the
// driver's own exit handlers (cuModuleUnload would fail there).
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef SNAPKV_GPU
#include <cuda.h>
#endif

namespace {

struct Desc4 {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[4];
  int64_t strides[4];
};
struct Desc3 {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[3];
  int64_t strides[3];
};
// What a function with results (keys, values, indices) returns through the
// C interface: one struct of the three descriptors, by pointer.
struct Results {
  Desc4 keys;
  Desc4 values;
  Desc3 indices;
};
using SelectFn = void (*)(Results *, Desc4 *, Desc4 *, Desc4 *);

} // namespace

// The generated host code copies a result whose layout bufferisation left
// strided into the identity-layout buffer it returns with `memrefCopy`, the
// MLIR C runner utilities' entry point. This harness links no LLVM library,
// so it provides that function itself (same ABI: element size, unranked
// source and destination descriptors).
namespace {
struct Unranked {
  int64_t rank;
  void *descriptor;
};
} // namespace

extern "C" void memrefCopy(int64_t elemSize, Unranked *src, Unranked *dst) {
  // A ranked descriptor: allocated, aligned, offset, sizes[rank],
  // strides[rank].
  struct View {
    char *base;
    int64_t offset;
    const int64_t *sizes;
    const int64_t *strides;
  };
  auto view = [](const Unranked *m) {
    auto *words = static_cast<int64_t *>(m->descriptor);
    View v;
    std::memcpy(&v.base, &words[1], sizeof(void *));
    v.offset = words[2];
    v.sizes = &words[3];
    v.strides = &words[3 + m->rank];
    return v;
  };
  int64_t rank = src->rank;
  View from = view(src), to = view(dst);
  std::vector<int64_t> index(rank, 0);
  int64_t total = 1;
  for (int64_t d = 0; d < rank; ++d)
    total *= from.sizes[d];
  for (int64_t n = 0; n < total; ++n) {
    int64_t a = from.offset, b = to.offset;
    for (int64_t d = 0; d < rank; ++d) {
      a += index[d] * from.strides[d];
      b += index[d] * to.strides[d];
    }
    std::memcpy(to.base + b * elemSize, from.base + a * elemSize, elemSize);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++index[d] < from.sizes[d])
        break;
      index[d] = 0;
    }
  }
}

#define SNAPKV_CONFIG(name, ...)                                               \
  extern "C" void _mlir_ciface_##name(Results *, Desc4 *, Desc4 *, Desc4 *);
#include "configs.inc"
#undef SNAPKV_CONFIG

namespace {

struct Config {
  const char *name;
  const char *elem;
  int elemBytes;
  int64_t batch, qHeads, kvHeads, dim, window, capacity, kernel;
  const char *pooling, *gqa, *order;
  double scale;
  SelectFn fn;
  int64_t cacheHeads() const {
    return std::strcmp(gqa, "expand") == 0 ? qHeads : kvHeads;
  }
};

const Config kConfigs[] = {
#define SNAPKV_CONFIG(name, elem, bytes, B, Hq, Hkv, D, W, C, kernel, pooling,  \
                      gqa, order, scale)                                       \
  {#name, elem,    bytes, B,     Hq,    Hkv,   D, W, C, kernel,                \
   pooling, gqa, order, scale, _mlir_ciface_##name},
#include "configs.inc"
#undef SNAPKV_CONFIG
};

const Config *findConfig(const char *name) {
  for (const Config &c : kConfigs)
    if (std::strcmp(c.name, name) == 0)
      return &c;
  std::fprintf(stderr, "unknown config '%s' (see `list`)\n", name);
  return nullptr;
}

[[noreturn]] void finish(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------
// Memory: device memory with a GPU, host memory in the emulation.
#ifdef SNAPKV_GPU
void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS)
    return;
  const char *name = "?", *text = "";
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  std::fprintf(stderr, "harness: %s failed: CUresult %d, %s (%s)\n", what,
               static_cast<int>(r), name, text);
  finish(3);
}
#define CK(x) check((x), #x)

CUdevice gDevice;
void deviceInit() {
  static bool done = false;
  if (done)
    return;
  CK(cuInit(0));
  CK(cuDeviceGet(&gDevice, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, gDevice));
  CK(cuCtxSetCurrent(ctx));
  done = true;
}

// The runtime keeps the first failed driver call instead of aborting; a
// compiled call whose device work failed is reported here (exit code 3).
extern "C" const char *snapkv_cuda_error();
bool deviceFailed() {
  const char *error = snapkv_cuda_error();
  if (error)
    std::fprintf(stderr, "harness: the compiled select failed: %s\n", error);
  return error;
}
#else
bool deviceFailed() { return false; }
#endif

// Both variants are compiled with asserts=report: a failed run-time check of
// the select (an input it rejects) returns with its message (exit code 4).
extern "C" const char *snapkv_last_error();
void checkRuntime() {
  const char *check = snapkv_last_error();
  if (check)
    std::fprintf(stderr, "harness: the select rejected its input: %s\n", check);
  bool device = deviceFailed();
  if (check || device)
    finish(check ? 4 : 3);
}

struct Buffer {
  void *ptr = nullptr;
  size_t bytes = 0;
  bool device = false;
};

Buffer allocBuffer(size_t bytes, bool device) {
  Buffer b;
  b.bytes = bytes;
  b.device = device;
#ifdef SNAPKV_GPU
  if (device) {
    deviceInit();
    CUdeviceptr p = 0;
    CK(cuMemAlloc(&p, bytes ? bytes : 1));
    b.ptr = reinterpret_cast<void *>(p);
    return b;
  }
#else
  b.device = false;
#endif
  b.ptr = std::malloc(bytes ? bytes : 1);
  if (!b.ptr) {
    std::fprintf(stderr, "harness: out of host memory (%zu bytes)\n", bytes);
    finish(3);
  }
  return b;
}

void upload(Buffer &b, const void *host) {
#ifdef SNAPKV_GPU
  if (b.device) {
    CK(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(b.ptr), host, b.bytes));
    return;
  }
#endif
  std::memcpy(b.ptr, host, b.bytes);
}

void freeBuffer(Buffer &b) {
#ifdef SNAPKV_GPU
  if (b.device) {
    CK(cuMemFree(reinterpret_cast<CUdeviceptr>(b.ptr)));
    b.ptr = nullptr;
    return;
  }
#endif
  std::free(b.ptr);
  b.ptr = nullptr;
}

Desc4 describe(const Buffer &b, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  Desc4 d;
  d.allocated = d.aligned = b.ptr;
  d.offset = 0;
  d.sizes[0] = d0, d.sizes[1] = d1, d.sizes[2] = d2, d.sizes[3] = d3;
  d.strides[3] = 1;
  d.strides[2] = d3;
  d.strides[1] = d2 * d3;
  d.strides[0] = d1 * d2 * d3;
  return d;
}

void releaseResults(Results &r) {
  std::free(r.keys.allocated);
  std::free(r.values.allocated);
  std::free(r.indices.allocated);
}

// ---------------------------------------------------------------------------
// Per-kernel GPU times: the link routes the generated code's calls of
// mgpuLaunchKernel here (-Wl,--wrap=mgpuLaunchKernel).
#ifdef SNAPKV_GPU
constexpr int kMaxLaunches = 8;
bool gProfile = false;
int gLaunches = 0;
CUevent gEvents[2 * kMaxLaunches];
int64_t gGrid[kMaxLaunches], gBlock[kMaxLaunches];

void profileInit() {
  static bool done = false;
  if (done)
    return;
  deviceInit();
  for (CUevent &e : gEvents)
    CK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  done = true;
}
#endif

} // namespace

#ifdef SNAPKV_GPU
extern "C" void __real_mgpuLaunchKernel(void *, intptr_t, intptr_t, intptr_t,
                                        intptr_t, intptr_t, intptr_t, int32_t,
                                        void *, void **, void **, size_t);
extern "C" void __wrap_mgpuLaunchKernel(void *fn, intptr_t gx, intptr_t gy,
                                        intptr_t gz, intptr_t bx, intptr_t by,
                                        intptr_t bz, int32_t smem, void *stream,
                                        void **params, void **extra,
                                        size_t nparams) {
  if (!gProfile || gLaunches >= kMaxLaunches) {
    __real_mgpuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params,
                            extra, nparams);
    return;
  }
  int i = gLaunches++;
  CUstream s = static_cast<CUstream>(stream);
  CK(cuEventRecord(gEvents[2 * i], s));
  __real_mgpuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params,
                          extra, nparams);
  CK(cuEventRecord(gEvents[2 * i + 1], s));
  gGrid[i] = gx * gy * gz;
  gBlock[i] = bx * by * bz;
}
#endif

namespace {

bool readFile(const char *path, std::vector<char> &out) {
  FILE *f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path);
    return false;
  }
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  out.resize(static_cast<size_t>(size));
  bool ok = size == 0 || std::fread(out.data(), 1, out.size(), f) == out.size();
  std::fclose(f);
  if (!ok)
    std::fprintf(stderr, "cannot read %s\n", path);
  return ok;
}

bool writeFile(const std::string &path, const void *data, size_t bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  bool ok = bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes;
  std::fclose(f);
  return ok;
}

template <typename D>
bool contiguous(const D &d, int rank) {
  int64_t expect = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (d.sizes[i] != 1 && d.strides[i] != expect)
      return false;
    expect *= d.sizes[i];
  }
  return true;
}

/// One `run`: returns 0 on success.
int runOne(const Config &c, const char *qPath, const char *kPath,
           const char *vPath, const std::string &prefix, bool deviceInputs) {
  std::vector<char> q, k, v;
  if (!readFile(qPath, q) || !readFile(kPath, k) || !readFile(vPath, v))
    return 1;
  size_t e = c.elemBytes;
  size_t qBytes = c.batch * c.qHeads * c.window * c.dim * e;
  size_t row = c.batch * c.kvHeads * c.dim * e;
  if (q.size() != qBytes || k.size() % row || k.size() != v.size() ||
      k.empty()) {
    std::fprintf(stderr,
                 "%s: bad input sizes: q %zu (want %zu), k %zu, v %zu (k and v "
                 "must be equal multiples of %zu)\n",
                 c.name, q.size(), qBytes, k.size(), v.size(), row);
    return 1;
  }
  // L < W is the select's own run-time check (reported, exit code 4).
  int64_t length = static_cast<int64_t>(k.size() / row);
  Buffer qb = allocBuffer(q.size(), deviceInputs);
  Buffer kb = allocBuffer(k.size(), deviceInputs);
  Buffer vb = allocBuffer(v.size(), deviceInputs);
  upload(qb, q.data());
  upload(kb, k.data());
  upload(vb, v.data());
  Desc4 qd = describe(qb, c.batch, c.qHeads, c.window, c.dim);
  Desc4 kd = describe(kb, c.batch, c.kvHeads, length, c.dim);
  Desc4 vd = describe(vb, c.batch, c.kvHeads, length, c.dim);
  Results r;
  std::memset(&r, 0, sizeof(r));
  double t0 = nowMs();
  c.fn(&r, &qd, &kd, &vd);
  double ms = nowMs() - t0;
  checkRuntime();
  freeBuffer(qb);
  freeBuffer(kb);
  freeBuffer(vb);

  int64_t heads = c.cacheHeads();
  int64_t kept = std::min(length, c.capacity);
  int status = 0;
  const int64_t want4[4] = {c.batch, heads, kept, c.dim};
  for (const Desc4 *d : {&r.keys, &r.values})
    for (int i = 0; i < 4; ++i)
      if (d->sizes[i] != want4[i])
        status = 1;
  for (int i = 0; i < 3; ++i)
    if (r.indices.sizes[i] != want4[i])
      status = 1;
  if (status) {
    std::fprintf(stderr, "%s: unexpected result shapes\n", c.name);
  } else if (!contiguous(r.keys, 4) || !contiguous(r.values, 4) ||
             !contiguous(r.indices, 3)) {
    std::fprintf(stderr, "%s: results are not contiguous\n", c.name);
    status = 1;
  } else {
    size_t rows = c.batch * heads * kept;
    bool ok =
        writeFile(prefix + ".idx.bin",
                  static_cast<int64_t *>(r.indices.aligned) + r.indices.offset,
                  rows * 8) &&
        writeFile(prefix + ".keys.bin",
                  static_cast<char *>(r.keys.aligned) + r.keys.offset * e,
                  rows * c.dim * e) &&
        writeFile(prefix + ".values.bin",
                  static_cast<char *>(r.values.aligned) + r.values.offset * e,
                  rows * c.dim * e);
    status = ok ? 0 : 1;
  }
  releaseResults(r);
  if (status == 0)
    std::printf("RUN %s L=%lld S=%lld Hc=%lld ms=%.3f inputs=%s\n", c.name,
                (long long)length, (long long)kept, (long long)heads, ms,
                deviceInputs ? "device" : "host");
  return status;
}

// ---------------------------------------------------------------------------
// Random inputs for `time`.
struct Rng {
  uint64_t s;
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 16);
  }
  float uniform() { // [-1, 1)
    return static_cast<float>(next() & 0xFFFFFF) * (2.0f / 16777216.0f) - 1.0f;
  }
};

uint16_t toBF16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// float -> IEEE half, round to nearest even (no _Float16: older g++ lacks it in C++).
uint16_t toF16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7FFFFFFFu;
  if (absu >= 0x7F800000u) // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (absu > 0x7F800000u ? 0x200u : 0));
  if (absu >= 0x477FF000u) // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  if (absu < 0x38800000u) { // subnormal half (or zero)
    float f;
    std::memcpy(&f, &absu, 4);
    // Scale to units of 2^-24 and round to nearest even.
    float scaled = f * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = absu & 0x7FFFFFu;
  uint32_t exp = (absu >> 23) - 112; // rebias 127 -> 15
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
    ++h; // may carry into the exponent, which is still correct
  return static_cast<uint16_t>(sign | h);
}

std::vector<char> randomArray(const Config &c, size_t count, float amp,
                              Rng &rng) {
  std::vector<char> out(count * c.elemBytes);
  for (size_t i = 0; i < count; ++i) {
    float x = rng.uniform() * amp;
    if (c.elemBytes == 4) {
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else if (std::strcmp(c.elem, "bf16") == 0) {
      uint16_t h = toBF16(x);
      std::memcpy(out.data() + 2 * i, &h, 2);
    } else {
      uint16_t h = toF16(x);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

struct Stats {
  double median = 0, min = 0, mean = 0;
  size_t n = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.median = v.size() % 2 ? v[v.size() / 2]
                          : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  double sum = 0;
  for (double x : v)
    sum += x;
  s.mean = sum / v.size();
  return s;
}

int timeCmd(const Config &c, int64_t length, int repeats, int warmup,
            double maxSeconds, uint64_t seed, bool extra) {
  if (length < c.window) {
    std::fprintf(stderr, "L must be >= the window %lld\n", (long long)c.window);
    return 1;
  }
#ifdef SNAPKV_GPU
  const bool device = true;
  deviceInit();
  char name[256] = {0};
  CK(cuDeviceGetName(name, sizeof(name), gDevice));
  int driver = 0;
  CK(cuDriverGetVersion(&driver));
  std::printf("device: %s, driver API %d\n", name, driver);
#else
  const bool device = false;
  std::printf("device: cpu-emulation (host memory)\n");
#endif
  Rng rng{0x9E3779B97F4A7C15ull ^ (seed * 0x100000001B3ull) ^ 1};
  size_t qCount = c.batch * c.qHeads * c.window * c.dim;
  size_t kvCount = c.batch * c.kvHeads * length * c.dim;
  Buffer qb = allocBuffer(qCount * c.elemBytes, device);
  Buffer kb = allocBuffer(kvCount * c.elemBytes, device);
  Buffer vb = allocBuffer(kvCount * c.elemBytes, device);
  {
    std::vector<char> h = randomArray(c, qCount, 2.0f, rng);
    upload(qb, h.data());
    h = randomArray(c, kvCount, 1.0f, rng);
    upload(kb, h.data());
    h = randomArray(c, kvCount, 1.0f, rng);
    upload(vb, h.data());
  }
  Desc4 qd = describe(qb, c.batch, c.qHeads, c.window, c.dim);
  Desc4 kd = describe(kb, c.batch, c.kvHeads, length, c.dim);
  Desc4 vd = describe(vb, c.batch, c.kvHeads, length, c.dim);

  auto call = [&]() {
    Results r;
    std::memset(&r, 0, sizeof(r));
    double t0 = nowMs();
    c.fn(&r, &qd, &kd, &vd);
    double ms = nowMs() - t0;
    checkRuntime();
    releaseResults(r);
    return ms;
  };
  auto timed = [&](int count, double budgetMs) {
    std::vector<double> times;
    double start = nowMs();
    for (int i = 0; i < count; ++i) {
      times.push_back(call());
      if (nowMs() - start > budgetMs && times.size() >= 3)
        break;
    }
    return times;
  };

  double startAll = nowMs();
  std::vector<double> warm;
  for (int i = 0; i < warmup; ++i)
    warm.push_back(call());
  // The default-pool runs get most of the budget; the extra runs share the rest.
  double budget = maxSeconds * 1000.0;
  Stats wall = stats(timed(repeats, extra ? 0.6 * budget : budget));
  std::printf("%s L=%lld: wall median %.3f ms, min %.3f ms, mean %.3f ms over %zu "
              "runs (warmup %d: first %.3f ms)\n",
              c.name, (long long)length, wall.median, wall.min, wall.mean,
              wall.n, warmup, warm.empty() ? 0.0 : warm.front());

  std::string json;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"config\":\"%s\",\"L\":%lld,\"S\":%lld,\"Hc\":%lld,"
                "\"device\":%s,\"runs\":%zu,\"warmup\":%d,\"first_ms\":%.6f,"
                "\"wall_ms_median\":%.6f,\"wall_ms_min\":%.6f,"
                "\"wall_ms_mean\":%.6f",
                c.name, (long long)length,
                (long long)std::min(length, c.capacity),
                (long long)c.cacheHeads(), device ? "true" : "false", wall.n,
                warmup, warm.empty() ? 0.0 : warm.front(), wall.median,
                wall.min, wall.mean);
  json += buf;

#ifdef SNAPKV_GPU
  if (extra) {
    // (a) Per-kernel GPU times from events around each launch (up to 3 calls).
    profileInit();
    int profiled = static_cast<int>(std::min<size_t>(3, std::max<size_t>(wall.n, 1)));
    std::vector<std::vector<double>> perKernel;
    std::vector<double> kernelSum, profiledWall;
    int launches = 0;
    for (int i = 0; i < profiled; ++i) {
      gProfile = true;
      gLaunches = 0;
      profiledWall.push_back(call());
      gProfile = false;
      launches = gLaunches;
      if (perKernel.size() < static_cast<size_t>(launches))
        perKernel.resize(launches);
      double sum = 0;
      for (int k = 0; k < launches; ++k) {
        CK(cuEventSynchronize(gEvents[2 * k + 1]));
        float ms = 0;
        CK(cuEventElapsedTime(&ms, gEvents[2 * k], gEvents[2 * k + 1]));
        perKernel[k].push_back(ms);
        sum += ms;
      }
      kernelSum.push_back(sum);
    }
    Stats ks = stats(kernelSum);
    std::printf("%s L=%lld: kernels (GPU events) median total %.3f ms:", c.name,
                (long long)length, ks.median);
    json += ",\"kernel_ms\":[";
    for (int k = 0; k < launches; ++k) {
      Stats s = stats(perKernel[k]);
      std::printf(" k%d %.3f ms (grid %lld x %lld)", k, s.median,
                  (long long)gGrid[k], (long long)gBlock[k]);
      std::snprintf(buf, sizeof(buf), "%s%.6f", k ? "," : "", s.median);
      json += buf;
    }
    std::printf("\n");
    json += "],\"kernel_grid\":[";
    for (int k = 0; k < launches; ++k) {
      std::snprintf(buf, sizeof(buf), "%s[%lld,%lld]", k ? "," : "",
                    (long long)gGrid[k], (long long)gBlock[k]);
      json += buf;
    }
    std::snprintf(buf, sizeof(buf), "],\"kernel_ms_total_median\":%.6f",
                  ks.median);
    json += buf;

    // (b) Keep freed device memory in the pool between calls.
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, gDevice));
    cuuint64_t threshold = UINT64_MAX;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                             &threshold));
    call();
    double used = nowMs() - startAll;
    Stats kept = stats(timed(repeats, std::max(0.0, budget - used)));
    std::printf("%s L=%lld: wall with the pool keeping memory: median %.3f ms, "
                "min %.3f ms over %zu runs\n",
                c.name, (long long)length, kept.median, kept.min, kept.n);
    std::snprintf(buf, sizeof(buf),
                  ",\"pool_keep_wall_ms_median\":%.6f,"
                  "\"pool_keep_wall_ms_min\":%.6f,\"pool_keep_runs\":%zu",
                  kept.median, kept.min, kept.n);
    json += buf;
  }
#else
  (void)extra;
  (void)startAll;
#endif
  json += "}";
  std::printf("RESULT %s\n", json.c_str());
  freeBuffer(qb);
  freeBuffer(kb);
  freeBuffer(vb);
  return 0;
}

int usage() {
  std::fprintf(
      stderr,
      "usage:\n"
      "  %s list | info\n"
      "  %s run CONFIG q.bin k.bin v.bin OUT_PREFIX [--device-inputs]\n"
      "  %s batch MANIFEST   (lines: CONFIG q.bin k.bin v.bin OUT_PREFIX "
      "[device])\n"
      "  %s time CONFIG L REPEATS [--warmup N] [--max-seconds S] [--seed N] "
      "[--no-extra]\n",
      "snapkv-gpu-bench", "snapkv-gpu-bench", "snapkv-gpu-bench",
      "snapkv-gpu-bench");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  // Line-buffered output, so a crash in a later run keeps earlier lines.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2)
    finish(usage());
  std::string cmd = argv[1];
  if (cmd == "list") {
    for (const Config &c : kConfigs)
      std::printf("%s %s B=%lld Hq=%lld Hkv=%lld D=%lld W=%lld C=%lld "
                  "kernel=%lld pooling=%s gqa=%s order=%s scale=%g\n",
                  c.name, c.elem, (long long)c.batch, (long long)c.qHeads,
                  (long long)c.kvHeads, (long long)c.dim, (long long)c.window,
                  (long long)c.capacity, (long long)c.kernel, c.pooling, c.gqa,
                  c.order, c.scale);
    finish(0);
  }
  if (cmd == "info") {
#ifdef SNAPKV_GPU
    deviceInit();
    char name[256] = {0};
    CK(cuDeviceGetName(name, sizeof(name), gDevice));
    int driver = 0, major = 0, minor = 0;
    CK(cuDriverGetVersion(&driver));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                            gDevice));
    CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                            gDevice));
    std::printf("gpu: %s sm_%d%d driver-api %d\n", name, major, minor, driver);
#else
    std::printf("cpu-emulation\n");
#endif
    finish(0);
  }
  if (cmd == "run") {
    if (argc < 7)
      finish(usage());
    const Config *c = findConfig(argv[2]);
    if (!c)
      finish(2);
    bool deviceInputs = argc > 7 && std::strcmp(argv[7], "--device-inputs") == 0;
    finish(runOne(*c, argv[3], argv[4], argv[5], argv[6], deviceInputs));
  }
  if (cmd == "batch") {
    if (argc < 3)
      finish(usage());
    FILE *f = std::fopen(argv[2], "r");
    if (!f) {
      std::fprintf(stderr, "cannot open %s\n", argv[2]);
      finish(2);
    }
    char line[4096];
    int failures = 0;
    while (std::fgets(line, sizeof(line), f)) {
      char name[256], qp[1024], kp[1024], vp[1024], prefix[1024], dev[64] = "";
      int n = std::sscanf(line, "%255s %1023s %1023s %1023s %1023s %63s", name,
                          qp, kp, vp, prefix, dev);
      if (n < 5)
        continue;
      const Config *c = findConfig(name);
      int rc = c ? runOne(*c, qp, kp, vp, prefix, std::strcmp(dev, "device") == 0)
                 : 1;
      if (rc) {
        std::printf("FAILED %s %s\n", name, prefix);
        ++failures;
      }
    }
    std::fclose(f);
    finish(failures ? 1 : 0);
  }
  if (cmd == "time") {
    if (argc < 5)
      finish(usage());
    const Config *c = findConfig(argv[2]);
    if (!c)
      finish(2);
    int64_t length = std::atoll(argv[3]);
    int repeats = std::max(1, std::atoi(argv[4]));
    int warmup = 2;
    double maxSeconds = 60;
    uint64_t seed = 1;
    bool extra = true;
    for (int i = 5; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--warmup" && i + 1 < argc)
        warmup = std::atoi(argv[++i]);
      else if (a == "--max-seconds" && i + 1 < argc)
        maxSeconds = std::atof(argv[++i]);
      else if (a == "--seed" && i + 1 < argc)
        seed = std::strtoull(argv[++i], nullptr, 10);
      else if (a == "--no-extra")
        extra = false;
      else
        finish(usage());
    }
    finish(timeCmd(*c, length, repeats, warmup, maxSeconds, seed, extra));
  }
  finish(usage());
}
