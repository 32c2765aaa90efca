// Replaces the C allocation functions (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign) of the test
// binary that links it, so heap_counter.hpp also counts what C code and libraries allocate outside operator new:
// oneDNN's objects (its c_compatible types go through posix_memalign), OpenBLAS's and libgomp's buffers. Each call
// is reported to count_c_allocation() (which counts only while a stretch is being counted, and never recurses) and
// then served by glibc's own allocator (__libc_*), so free() stays glibc's. glibc only (as backtrace and dladdr are).
#include <cerrno>
#include <cstddef>
#include <cstdlib>

#include "heap_counter.hpp"

extern "C" {
void* __libc_malloc(std::size_t bytes) noexcept;
void* __libc_calloc(std::size_t count, std::size_t bytes) noexcept;
void* __libc_realloc(void* old, std::size_t bytes) noexcept;
void* __libc_memalign(std::size_t align, std::size_t bytes) noexcept;

int cleave_c_alloc_counter_linked() { return 1; }

void* malloc(std::size_t bytes) noexcept {
  cleave::testing::heap::count_c_allocation();
  return __libc_malloc(bytes);
}
void* calloc(std::size_t count, std::size_t bytes) noexcept {
  cleave::testing::heap::count_c_allocation();
  return __libc_calloc(count, bytes);
}
void* realloc(void* old, std::size_t bytes) noexcept {
  cleave::testing::heap::count_c_allocation();
  return __libc_realloc(old, bytes);
}
int posix_memalign(void** out, std::size_t align, std::size_t bytes) noexcept {
  cleave::testing::heap::count_c_allocation();
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(align, bytes);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(std::size_t align, std::size_t bytes) noexcept {
  cleave::testing::heap::count_c_allocation();
  return __libc_memalign(align, bytes);
}
void* memalign(std::size_t align, std::size_t bytes) noexcept {
  cleave::testing::heap::count_c_allocation();
  return __libc_memalign(align, bytes);
}
}
