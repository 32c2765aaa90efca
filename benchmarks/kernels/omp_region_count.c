// Counts OpenMP team creations (calls of libgomp's GOMP_parallel entry points) per outlined function, for
// LD_PRELOAD into any program built with GCC's OpenMP. Issue 39: which CPU kernels still enter OpenMP per step.
//
//   gcc -O2 -shared -fPIC -o /tmp/omp_region_count.so benchmarks/kernels/omp_region_count.c -ldl
//   OMP_REGION_COUNT_OUT=/tmp/regions.txt LD_PRELOAD=/tmp/omp_region_count.so cleave train ...
//
// At exit each process appends "<calls> <object file> <offset of the outlined region body>" lines (most first,
// then a "total" line) to $OMP_REGION_COUNT_OUT (stderr when unset); `addr2line -f -C -e <object> <offset>`
// names the body, which names its kernel (`softmax_forward(...) [clone ._omp_fn.0]`, or libdnnl's own regions):
// benchmarks/kernels/omp_region_names.sh does that for a whole file. Per step: run N1 and N2 steps and take the
// difference over N2 - N1. Invariant: the wrapper only counts, then calls the real entry point with the same
// arguments, so the program's results do not change. Not thread-safe counting across concurrent callers beyond
// what the atomic adds give (a slot per function, found by linear probing; 512 slots).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kSlots = 512 };
static _Atomic(void*) slot_fn[kSlots];
static atomic_long slot_calls[kSlots];
static atomic_long unslotted;

static void count(void* fn) {
  size_t h = ((size_t)fn >> 4) % kSlots;
  for (int probe = 0; probe < kSlots; ++probe, h = (h + 1) % kSlots) {
    void* cur = atomic_load(&slot_fn[h]);
    if (cur == fn) {
      atomic_fetch_add(&slot_calls[h], 1);
      return;
    }
    if (cur == NULL) {
      void* expected = NULL;
      if (atomic_compare_exchange_strong(&slot_fn[h], &expected, fn) || expected == fn) {
        atomic_fetch_add(&slot_calls[h], 1);
        return;
      }
    }
  }
  atomic_fetch_add(&unslotted, 1);
}

typedef void (*body_fn)(void*);
typedef void (*gomp_parallel_fn)(body_fn, void*, unsigned, unsigned);
typedef void (*gomp_parallel_loop_fn)(body_fn, void*, unsigned, long, long, long, long, unsigned);

void GOMP_parallel(body_fn fn, void* data, unsigned num_threads, unsigned flags) {
  static gomp_parallel_fn real;
  if (!real) real = (gomp_parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
  count((void*)fn);
  real(fn, data, num_threads, flags);
}

#define CLEAVE_LOOP_WRAPPER(name)                                                                          \
  void name(body_fn fn, void* data, unsigned num_threads, long start, long end, long incr, long chunk,    \
            unsigned flags) {                                                                             \
    static gomp_parallel_loop_fn real;                                                                    \
    if (!real) real = (gomp_parallel_loop_fn)dlsym(RTLD_NEXT, #name);                                     \
    count((void*)fn);                                                                                     \
    real(fn, data, num_threads, start, end, incr, chunk, flags);                                          \
  }
CLEAVE_LOOP_WRAPPER(GOMP_parallel_loop_static)
CLEAVE_LOOP_WRAPPER(GOMP_parallel_loop_dynamic)
CLEAVE_LOOP_WRAPPER(GOMP_parallel_loop_guided)
CLEAVE_LOOP_WRAPPER(GOMP_parallel_loop_runtime)

static int by_calls(const void* a, const void* b) {
  const long ca = atomic_load(&slot_calls[*(const int*)a]), cb = atomic_load(&slot_calls[*(const int*)b]);
  return ca < cb ? 1 : ca > cb ? -1 : 0;
}

__attribute__((destructor)) static void report(void) {
  int order[kSlots], used = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (atomic_load(&slot_fn[i]) != NULL) order[used++] = i;
  }
  qsort(order, (size_t)used, sizeof order[0], by_calls);
  const char* path = getenv("OMP_REGION_COUNT_OUT");
  FILE* out = path ? fopen(path, "a") : stderr;
  if (!out) out = stderr;
  long total = atomic_load(&unslotted);
  for (int j = 0; j < used; ++j) {
    const int i = order[j];
    Dl_info info;
    void* fn = atomic_load(&slot_fn[i]);
    const long calls = atomic_load(&slot_calls[i]);
    total += calls;
    if (dladdr(fn, &info) && info.dli_fname) {
      fprintf(out, "%ld %s 0x%lx\n", calls, info.dli_fname, (unsigned long)((char*)fn - (char*)info.dli_fbase));
    } else {
      fprintf(out, "%ld ? %p\n", calls, fn);
    }
  }
  fprintf(out, "%ld total\n", total);
  if (out != stderr) fclose(out);
}
