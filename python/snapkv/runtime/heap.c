/* The heap of a compiled library, counted and cached: snapkv-cpu-pipeline{generic-alloc=true}
 * lowers memref.alloc and memref.dealloc to these functions (upstream's names), linked into
 * every library the runner builds (build.py).
 *
 * Counted: each call counts the bytes malloc actually reserved (malloc_usable_size), so that
 * the runner can read what a call held at its peak (snapkv_heap_peak) without a table of
 * sizes. The runner frees the results it copied out with _mlir_memref_to_llvm_free too, so
 * the count ends where it began. Atomics: allocations happen on every OpenMP thread.
 *
 * Cached: glibc serves a large block (above its mmap threshold) with a fresh mmap and returns
 * it to the kernel at free, so every layer of a long prefill faulted its buffers in again and
 * the kernel zeroed each page (clear_page was an eighth of a 4,000-token prefill's profile).
 * Here a freed block of at least CACHE_MIN bytes is kept, up to a limit of bytes and SLOTS
 * blocks (the least recently freed go first), and the next allocation that fits it with at
 * most an eighth to spare takes it back (the smallest such block): the same buffer of the
 * next layer, or of a prompt of about the same length. The limit is
 * $SNAPKV_HEAP_CACHE_MB at load (default DEFAULT_LIMIT_MB; 0 turns the cache off) or
 * snapkv_heap_set_cache_limit; snapkv_heap_trim gives every kept block back. Only this
 * library's blocks are kept: the process's malloc settings are left as they are. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#define CACHE_MIN ((size_t)256 << 10)
#define SLOTS 128
#define DEFAULT_LIMIT_MB 1024

static _Atomic int64_t live, peak, cached, limit = (int64_t)DEFAULT_LIMIT_MB << 20;

/* The kept blocks: usable size and when each was freed (a counter). */
static struct {
  void *p;
  size_t size;
  uint64_t freed;
} slots[SLOTS];
static uint64_t clock_;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *counted(void *p) {
  if (p) {
    int64_t size = (int64_t)malloc_usable_size(p);
    int64_t now = atomic_fetch_add(&live, size) + size;
    int64_t seen = atomic_load(&peak);
    while (now > seen && !atomic_compare_exchange_weak(&peak, &seen, now)) {
    }
  }
  return p;
}

/* Frees kept blocks, the least recently freed first, until at most `keep` bytes are kept.
 * Called with the lock held. */
static void evict_to(int64_t keep) {
  while (atomic_load(&cached) > keep) {
    int oldest = -1;
    for (int i = 0; i < SLOTS; ++i)
      if (slots[i].p && (oldest < 0 || slots[i].freed < slots[oldest].freed))
        oldest = i;
    if (oldest < 0)
      return;
    atomic_fetch_sub(&cached, (int64_t)slots[oldest].size);
    free(slots[oldest].p);
    slots[oldest].p = NULL;
  }
}

/* The smallest kept block of `size` to `size + size / 8` bytes, or NULL. */
static void *take(size_t size) {
  void *p = NULL;
  pthread_mutex_lock(&lock);
  int best = -1;
  for (int i = 0; i < SLOTS; ++i)
    if (slots[i].p && slots[i].size >= size && slots[i].size - size <= size / 8 &&
        (best < 0 || slots[i].size < slots[best].size))
      best = i;
  if (best >= 0) {
    p = slots[best].p;
    slots[best].p = NULL;
    atomic_fetch_sub(&cached, (int64_t)slots[best].size);
  }
  pthread_mutex_unlock(&lock);
  return p;
}

/* Keeps `p` (`usable` bytes) if the limit allows; whether it did. */
static int keep(void *p, size_t usable) {
  int64_t most = atomic_load(&limit);
  if (usable < CACHE_MIN || (int64_t)usable > most)
    return 0;
  pthread_mutex_lock(&lock);
  evict_to(most - (int64_t)usable);
  int slot = -1;
  for (int i = 0; i < SLOTS && slot < 0; ++i)
    if (!slots[i].p)
      slot = i;
  if (slot < 0) { /* every slot holds a block: the oldest goes */
    slot = 0;
    for (int i = 1; i < SLOTS; ++i)
      if (slots[i].freed < slots[slot].freed)
        slot = i;
    atomic_fetch_sub(&cached, (int64_t)slots[slot].size);
    free(slots[slot].p);
  }
  slots[slot].p = p;
  slots[slot].size = usable;
  slots[slot].freed = ++clock_;
  atomic_fetch_add(&cached, (int64_t)usable);
  pthread_mutex_unlock(&lock);
  return 1;
}

void snapkv_heap_trim(void) {
  pthread_mutex_lock(&lock);
  evict_to(0);
  pthread_mutex_unlock(&lock);
}

void *_mlir_memref_to_llvm_alloc(size_t size) {
  if (size < CACHE_MIN || atomic_load(&limit) == 0)
    return counted(malloc(size));
  void *p = take(size);
  if (!p && !(p = malloc(size))) {
    /* Out of memory: what is kept may make the difference. */
    snapkv_heap_trim();
    p = malloc(size);
  }
  return counted(p);
}

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  return counted(aligned_alloc(alignment, size));
}

void _mlir_memref_to_llvm_free(void *p) {
  if (!p)
    return;
  size_t usable = malloc_usable_size(p);
  atomic_fetch_sub(&live, (int64_t)usable);
  if (!keep(p, usable))
    free(p);
}

/* Bytes allocated and not yet freed. */
int64_t snapkv_heap_live(void) { return atomic_load(&live); }

/* The most bytes held at once since the last snapkv_heap_reset_peak. */
int64_t snapkv_heap_peak(void) { return atomic_load(&peak); }

void snapkv_heap_reset_peak(void) { atomic_store(&peak, atomic_load(&live)); }

/* Bytes of freed blocks kept for reuse (not in snapkv_heap_live). */
int64_t snapkv_heap_cached(void) { return atomic_load(&cached); }

int64_t snapkv_heap_cache_limit(void) { return atomic_load(&limit); }

/* At most `bytes` kept from now on (0: none); what is kept beyond it is freed. */
void snapkv_heap_set_cache_limit(int64_t bytes) {
  pthread_mutex_lock(&lock);
  atomic_store(&limit, bytes < 0 ? 0 : bytes);
  evict_to(atomic_load(&limit));
  pthread_mutex_unlock(&lock);
}

/* $SNAPKV_HEAP_CACHE_MB, when it is a whole number of megabytes (the Python runtime rejects
 * any other value with an error before it calls the library). */
__attribute__((constructor)) static void limit_from_environment(void) {
  const char *text = getenv("SNAPKV_HEAP_CACHE_MB");
  if (!text || !*text)
    return;
  char *end;
  errno = 0;
  long long megabytes = strtoll(text, &end, 10);
  if (*end || errno || megabytes < 0 || megabytes > (INT64_MAX >> 20))
    return;
  atomic_store(&limit, (int64_t)megabytes << 20);
}
