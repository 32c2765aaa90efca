// Internal: when an OpenMP loop pays on a few cores. Fork/join costs a few microseconds, so loops only go
// parallel above these sizes (measured on 2 cores: below ~32K floats a streaming loop is faster serial).
//
// Invariant: these thresholds only choose between serial and parallel execution of the same arithmetic;
// every kernel gives bit-identical results either way (no parallel reductions across threads).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu::detail {

inline constexpr int64_t kParallelMinElements = int64_t{1} << 15;

inline bool worth_parallel(int64_t elements) { return elements >= kParallelMinElements; }

}  // namespace cleave::kernels::cpu::detail
