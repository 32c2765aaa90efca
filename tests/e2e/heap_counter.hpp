// Counts the heap allocations (global operator new, every form) a stretch of code makes, and names their owners, for
// the steady-state tests (steady_state_heap_test.cpp on one rank, steady_state_heap_mpi_test.cpp under mpiexec).
// Linking heap_counter.cpp replaces the program's operator new and delete, so it lives in test binaries of their
// own, linked with their symbols exported (ENABLE_EXPORTS) so that dladdr names our functions: the counting is
// process state by nature (the one place a test keeps any).
//
// One mechanism, two levels. Each allocation made while counting is charged to one class, read from its call stack:
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
// The engine's allocations are then grouped by site (the innermost kSiteDepth frames of ours on the stack), and a
// test's table of owners charges each site to the first owner one of its frames names, innermost frame first
// (by_owner). malloc from C code (OpenBLAS, libgomp, MPI's own allocators, oneDNN's objects and buffers) is not
// operator new and is not counted there; a binary that also links c_alloc_counter.cpp counts those C allocations
// (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign) apart, by the same classes plus oneDNN's own
// (made inside oneDNN outside its execute: dnnl_memory_create's object and storage), read with c_allocations()
// (CLEAVE_HEAP_TRACE_C=N traces the first N of the kernel layer's and oneDNN's). probe() makes one allocation of ours at a known site, so a test can show that the counter sees
// and names what is made while it counts (a counter that sees nothing cannot pass). Environment:
// CLEAVE_HEAP_TRACE=N prints the call stacks of the first N allocations of each stretch not charged to oneDNN's
// execute or MPI (stderr; addresses for addr2line); CLEAVE_HEAP_SITES=N prints the N largest sites
// (print_largest_sites), grouped by their innermost CLEAVE_HEAP_SITE_DEPTH frames (default 1).
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
  std::int64_t unsited = 0;  // engine allocations the site table had no room for (a test asserts none)
  std::int64_t onednn = 0;   // C allocations only: inside oneDNN, outside its execute
  std::string str() const;
};

// One call stack of ours that allocated while counting: its frames' names, innermost first (demangled; a frame
// dladdr cannot name is its address), and how many allocations it made.
struct Site {
  std::int64_t count = 0;
  std::vector<std::string> frames;
  std::string str(std::size_t depth) const;  // the innermost depth frames' names (no parameters), " < " between
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

// One allocation (and its free) at the site heap::probe: call it once while counting; probe_owner() names it.
void probe();

// Whether a test holds an owner to zero: always, only in cases without mixture-of-experts layers (whose host
// routing and tensor sizes vary from step to step), or never (printed only).
enum class Hold : std::uint8_t { kAlways, kWithoutMoe, kNever };

// An owner of engine allocations: a frame whose name (without its parameters) contains one of `parts` is its.
struct Owner {
  const char* name;
  std::vector<const char*> parts;
  Hold hold;
  int per_step = 0;  // a held owner's bound: allocations per step at most (0: none)
};
Owner probe_owner();  // probe()'s site: a test puts it in its table and expects exactly one allocation there

// The engine's allocations of the last stretch by owner: each site is charged to the first owner one of its frames
// names, innermost frame first (owners tried in table order for each frame); `count` and `example` (the first
// site's innermost frames) have owners.size() + 1 entries, the last for sites no owner names.
struct ByOwner {
  std::vector<std::int64_t> count;
  std::vector<std::string> example;
};
ByOwner by_owner(const std::vector<Site>& sites, const std::vector<Owner>& owners);

// CLEAVE_HEAP_SITES=N: prints the N largest sites (stdout), grouped by their innermost CLEAVE_HEAP_SITE_DEPTH
// frames (1); nothing when unset.
void print_largest_sites(const std::vector<Site>& sites);

}  // namespace cleave::testing::heap
