// Measured f32 FMA peak of this CPU: each thread runs a loop of independent
// vector FMAs (ACCS accumulators, more than latency x issue width on current
// x86 cores, so the loop is throughput-bound) and we count 2 FLOPs per lane.
//
//   clang -O2 -march=native -pthread fma_peak.c -o fma_peak
//   ./fma_peak [threads ...]      (default: 1 2)
//
// Prints one line per thread count: "threads=T gflops=G lanes=N" with the
// median of 5 repetitions. Built and run by bench_select.py.

#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1(x) _mm512_set1_ps(x)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define ADD(a, b) _mm512_add_ps(a, b)
#define SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__FMA__) && defined(__AVX__)
typedef __m256 vec;
#define LANES 8
#define SET1(x) _mm256_set1_ps(x)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define ADD(a, b) _mm256_add_ps(a, b)
static float SUM(__m256 v) {
  float out[8];
  _mm256_storeu_ps(out, v);
  float s = 0;
  for (int i = 0; i < 8; ++i)
    s += out[i];
  return s;
}
#else
#error "needs AVX+FMA or AVX-512 (compile with -march=native on such a CPU)"
#endif

#define ACCS 12
static const long ITERS = 40L * 1000 * 1000;

struct job {
  float result;
};

static void *run(void *arg) {
  struct job *j = arg;
  // Twelve named accumulators (not an array) so that they live in registers.
  vec a0 = SET1(1.000f), a1 = SET1(1.001f), a2 = SET1(1.002f), a3 = SET1(1.003f),
      a4 = SET1(1.004f), a5 = SET1(1.005f), a6 = SET1(1.006f), a7 = SET1(1.007f),
      a8 = SET1(1.008f), a9 = SET1(1.009f), a10 = SET1(1.010f), a11 = SET1(1.011f);
  // x * m + c stays finite and never denormal: |m| < 1 converges to c/(1-m).
  // Read through volatile so that the compiler cannot fold the loop away.
  static volatile float mul = 0.999999f, add = 1e-6f;
  const vec m = SET1(mul), c = SET1(add);
  for (long it = 0; it < ITERS; ++it) {
    a0 = FMA(a0, m, c);
    a1 = FMA(a1, m, c);
    a2 = FMA(a2, m, c);
    a3 = FMA(a3, m, c);
    a4 = FMA(a4, m, c);
    a5 = FMA(a5, m, c);
    a6 = FMA(a6, m, c);
    a7 = FMA(a7, m, c);
    a8 = FMA(a8, m, c);
    a9 = FMA(a9, m, c);
    a10 = FMA(a10, m, c);
    a11 = FMA(a11, m, c);
  }
  vec s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));
  s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));
  j->result = SUM(s);
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double gflops(int threads) {
  pthread_t tid[threads];
  struct job jobs[threads];
  double t0 = now();
  for (int i = 0; i < threads; ++i)
    pthread_create(&tid[i], NULL, run, &jobs[i]);
  float sink = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(tid[i], NULL);
    sink += jobs[i].result;
  }
  double dt = now() - t0;
  if (sink != sink)
    fprintf(stderr, "unexpected NaN\n");
  return (double)threads * ITERS * ACCS * LANES * 2 / dt * 1e-9;
}

int main(int argc, char **argv) {
  int counts[16] = {1, 2}, n = 2;
  if (argc > 1) {
    n = 0;
    for (int i = 1; i < argc && n < 16; ++i)
      counts[n++] = atoi(argv[i]);
  }
  for (int c = 0; c < n; ++c) {
    if (counts[c] < 1 || counts[c] > 256) {
      fprintf(stderr, "bad thread count %d\n", counts[c]);
      return 1;
    }
    double g[5];
    for (int r = 0; r < 5; ++r)
      g[r] = gflops(counts[c]);
    qsort(g, 5, sizeof g[0], cmp);
    printf("threads=%d gflops=%.2f lanes=%d accumulators=%d\n", counts[c], g[2],
           LANES, ACCS);
  }
  return 0;
}
