// The loop of the CPU kernel tests that compare a kernel's vector paths (kernels/cpu/vector_isa.hpp) and thread
// counts: for_each_isa_path(paths, fn) calls fn(isa) for each of `paths` this CPU has; for_each_thread_count(threads,
// fn) sets OpenMP's thread count to each of `threads` around fn(threads); for_each_isa_path_and_threads does both,
// fn(isa, threads) (by default every path at 1, 2 and 3 threads).
//
// Invariant: a path the CPU lacks is never run (the kernels refuse it), and the thread count in force before a call
// of fn is in force again after it, whatever fn does (a failed ASSERT_* returns from fn early). Paths outer, thread
// counts inner, each in the order given.
#pragma once

#include <omp.h>

#include <initializer_list>
#include <span>
#include <string>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::test {

// Every path, and the paths past the baseline (for the tests that compare each with the baseline's outputs).
inline constexpr cpu::VectorIsa kEveryIsaPath[] = {cpu::VectorIsa::kBaseline, cpu::VectorIsa::kAvx2,
                                                   cpu::VectorIsa::kAvx512};
inline constexpr cpu::VectorIsa kIsaPathsPastBaseline[] = {cpu::VectorIsa::kAvx2, cpu::VectorIsa::kAvx512};

// "isa 2": how the tests' messages name a path.
inline std::string isa_label(cpu::VectorIsa isa) { return "isa " + std::to_string(static_cast<int>(isa)); }

template <class Fn>
void for_each_isa_path(std::span<const cpu::VectorIsa> paths, Fn&& fn) {
  for (const cpu::VectorIsa isa : paths) {
    if (cpu::vector_isa_available(isa)) fn(isa);
  }
}

// OpenMP's thread count set for a scope, the one before restored at its end.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

// fn(threads) for each count of `threads`, with OpenMP's thread count set to it during the call (for the kernels
// that take no path: they run the CPU's widest).
template <class Fn>
void for_each_thread_count(std::initializer_list<int> threads, Fn&& fn) {
  for (const int t : threads) {
    const ScopedOmpThreads scoped(t);
    fn(t);
  }
}

template <class Fn>
void for_each_isa_path_and_threads(std::span<const cpu::VectorIsa> paths, std::initializer_list<int> threads,
                                   Fn&& fn) {
  for_each_isa_path(paths, [&](cpu::VectorIsa isa) { for_each_thread_count(threads, [&](int t) { fn(isa, t); }); });
}

// Every path this CPU has at 1, 2 and 3 threads (3: a team that divides no power-of-two shape evenly).
template <class Fn>
void for_each_isa_path_and_threads(Fn&& fn) {
  for_each_isa_path_and_threads(kEveryIsaPath, {1, 2, 3}, fn);
}

}  // namespace cleave::kernels::test
