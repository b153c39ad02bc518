/* The heap of a compiled library, counted: snapkv-cpu-pipeline{generic-alloc=true} lowers
 * memref.alloc and memref.dealloc to these three functions (upstream's names), linked into
 * every library the runner builds (build.py). Each counts the bytes malloc actually reserved
 * (malloc_usable_size), so that the runner can read what a call held at its peak
 * (snapkv_heap_peak) without a table of sizes. The runner frees the results it copied out
 * with _mlir_memref_to_llvm_free too, so the count ends where it began. Atomics: allocations
 * happen on every OpenMP thread. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

static _Atomic int64_t live, peak;

static void *counted(void *p) {
  if (p) {
    int64_t now = atomic_fetch_add(&live, (int64_t)malloc_usable_size(p)) +
                  (int64_t)malloc_usable_size(p);
    int64_t seen = atomic_load(&peak);
    while (now > seen && !atomic_compare_exchange_weak(&peak, &seen, now)) {
    }
  }
  return p;
}

void *_mlir_memref_to_llvm_alloc(size_t size) { return counted(malloc(size)); }

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  return counted(aligned_alloc(alignment, size));
}

void _mlir_memref_to_llvm_free(void *p) {
  if (p) {
    atomic_fetch_sub(&live, (int64_t)malloc_usable_size(p));
    free(p);
  }
}

/* Bytes allocated and not yet freed. */
int64_t snapkv_heap_live(void) { return atomic_load(&live); }

/* The most bytes held at once since the last snapkv_heap_reset_peak. */
int64_t snapkv_heap_peak(void) { return atomic_load(&peak); }

void snapkv_heap_reset_peak(void) { atomic_store(&peak, atomic_load(&live)); }
