// Counts the heap allocations (global operator new, every form) a stretch of code makes, for the steady-state
// test (steady_state_heap_test.cpp). Linking heap_counter.cpp replaces the program's operator new and delete, so
// it lives in a test binary of its own, linked with its symbols exported (ENABLE_EXPORTS) so that dladdr names our
// functions: the counting is process state by nature (the one place a test keeps any).
//
// Each allocation made while counting is charged to one owner, read from its call stack:
//  - kOneDnnExecute: made inside oneDNN's dnnl_primitive_execute (oneDNN 2.x builds a map of the call's arguments
//    and an execution context per execute: out of our reach);
//  - kMpi: made inside the MPI library (a frame in libmpi, libopen-pal, libopen-rte, pmix or ucx);
//  - kKernels: else, when the innermost named function of ours is in the kernel layer: cleave::kernels (the CPU
//    kernels, GEMMs through oneDNN included: a dnnl::stream or dnnl::memory made per call is ours) or
//    cleave::ops::cpu_detail (the CPU backend's op slots);
//  - kEngine: else, when it is any other function of ours (tensors, the allocator's cache, layers, optimizer,
//    executor, trainer);
//  - kUnnamed: no named function of ours on the stack (code of ours with internal linkage run from an OpenMP worker,
//    or a library's own thread).
// malloc from C code (OpenBLAS, libgomp, MPI's own allocators, oneDNN's objects and buffers) is not operator new
// and is not counted there; a binary that also links c_alloc_counter.cpp counts those C allocations (malloc, calloc,
// realloc, posix_memalign, aligned_alloc, memalign) apart, by the same owners plus kOneDnn: made inside oneDNN
// outside its execute (dnnl_memory_create's object and storage), read with c_allocations(). CLEAVE_HEAP_TRACE=N prints the call stacks of the first N allocations of each stretch not charged to
// oneDNN's execute or MPI (stderr; addresses for addr2line).
//
// The engine's allocations are also grouped by site: the innermost kSiteDepth frames of ours on the stack (the
// allocator's, the tensor's, then the layer's or the executor's that asked), so a test can name the owner of each
// and print the largest (sites(), after stop()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cleave::testing::heap {

struct Counts {
  std::int64_t kernels = 0;
  std::int64_t engine = 0;
  std::int64_t unnamed = 0;
  std::int64_t onednn_execute = 0;
  std::int64_t mpi = 0;
  std::int64_t onednn = 0;  // C allocations only: inside oneDNN, outside its execute
  std::string str() const;
};

// One call stack of ours that allocated while counting: its frames' names, innermost first (demangled; a frame
// dladdr cannot name is its address), and how many allocations it made.
struct Site {
  std::int64_t count = 0;
  std::vector<std::string> frames;
  bool mentions(const std::string& part) const;  // any frame's name contains part
  std::string str(std::size_t depth) const;      // the innermost depth frames' names (no parameters), " < " between
};

// Counting between start() and stop() (one stretch at a time).
void start();
Counts stop();

// The C allocations of the last stretch (call after stop()), or nullopt in a binary without c_alloc_counter.cpp.
std::optional<Counts> c_allocations();

// c_alloc_counter.cpp's replaced malloc family calls this for each C allocation (it must not allocate).
void count_c_allocation();

// The engine's allocations (Counts::engine) of the last stretch by site, the largest first. Call after stop().
std::vector<Site> sites();

// Optional finer owners (the multi-rank test's areas, steady_state_heap_mpi_test.cpp): while set, `observer` is called
// with `context` and the call stack of each counted allocation charged to the engine (kEngine), inside the counter's
// guard. It must not allocate (dladdr and fixed tables only). Set it before start(); nullptr clears it.
using EngineObserver = void (*)(void* context, void* const* frames, int n);
void observe_engine(EngineObserver observer, void* context);

}  // namespace cleave::testing::heap
