// Internal: when an OpenMP loop pays on a few cores, and the loop macro that only enters OpenMP when it does.
// Fork/join costs a few microseconds, so loops only go parallel above these sizes (measured on 2 cores: below
// ~32K floats a streaming loop is faster serial).
//
// Invariant: these thresholds only choose between serial and parallel execution of the same arithmetic;
// every kernel gives bit-identical results either way (no parallel reductions across threads).
#pragma once

#include <omp.h>

#include <cstdint>

namespace cleave::kernels::cpu::detail {

inline constexpr int64_t kParallelMinElements = int64_t{1} << 15;

inline bool worth_parallel(int64_t elements) { return elements >= kParallelMinElements; }

// Streaming loops of one or two operations per element (add, scale, axpy, ReLU, the bf16 casts) cost about 0.05 ns
// per element from cache, so a 64K-element add takes ~3 us on one thread: a team saved at most 2 us of it with
// spinning threads (OMP_WAIT_POLICY=active) and cost 9-45 us under passive waiting, where every region wakes a
// sleeping thread (2 vCPU Zen 4; benchmarks/kernels/RESULTS-2026-11-30-e-step-overhead.md). From 128K elements a
// team pays again under active (6 us of 10 at 128K, 11 of 22 at 256K).
inline constexpr int64_t kStreamingParallelMinElements = int64_t{1} << 17;

inline bool worth_parallel_streaming(int64_t elements) { return elements >= kStreamingParallelMinElements; }

// A column reduction (a weight gradient: the bias's, LayerNorm's, RMSNorm's; each thread sums whole columns over every
// row) shares its blocks over the team only from about 2M element-operations (elements times the reduction's work
// per element: 1 for the bias gradient's add, 2 for RMSNorm's, 4 for LayerNorm's). Below that the team's wake-up
// under passive waiting (20-40 us on 2 vCPU Zen 4) costs more than the half of the sums it takes: the small peer
// GPT's bias gradients (1024 rows x 256-1024 columns, 15-135 us on one thread) took 1.2-1.8x as long on a team, its
// LayerNorm weight gradient (1024 x 256) 1.3x, where the large GPT's (2048 x 1536 and up) took 0.55-0.8x
// (benchmarks/kernels/column_team_bench.cpp, benchmarks/peers/RESULTS-2026-11-30-n-small-bf16.md).
inline constexpr int64_t kColumnParallelMinWork = int64_t{1} << 21;

inline bool worth_parallel_columns(int64_t element_operations) {
  return element_operations >= kColumnParallelMinWork;
}

// Whether a loop that is worth it (cond) may start a team here: not inside an active parallel region, where a
// nested region would run on one thread anyway.
inline bool parallel_here(bool cond) { return cond && !omp_in_parallel(); }

}  // namespace cleave::kernels::cpu::detail

// `for (int64_t var = 0; var < count; ++var) { body }`, shared out statically over the OpenMP team when
// detail::parallel_here(cond), else a plain loop on the calling thread. Why not `#pragma omp parallel for if
// (cond)`: GCC calls GOMP_parallel whatever the clause says, and a false clause still builds (allocates) and
// tears down a one-thread team. The bf16 chunked view (kernels/ops/cpu_chunked_view.hpp) calls the casts and the
// kernel once per 2,048-element chunk inside its own region: about 19,500 such calls per step of the Llama
// example in bf16 (issue 39, counted with a uprobe on GOMP_parallel). The body must not contain a #pragma (it is
// a macro argument); both branches run the same arithmetic, so results never depend on the branch taken.
#define CLEAVE_PARALLEL_FOR(var, count, cond, ...)                            \
  if (::cleave::kernels::cpu::detail::parallel_here(cond)) {                  \
    _Pragma("omp parallel for schedule(static)")                              \
    for (int64_t var = 0; var < (count); ++var) { __VA_ARGS__ }               \
  } else {                                                                    \
    for (int64_t var = 0; var < (count); ++var) { __VA_ARGS__ }               \
  }

// The same for a loop whose iterations are single elements: `omp parallel for simd` / `omp simd`.
#define CLEAVE_PARALLEL_FOR_SIMD(var, count, cond, ...)                       \
  if (::cleave::kernels::cpu::detail::parallel_here(cond)) {                  \
    _Pragma("omp parallel for simd schedule(static)")                         \
    for (int64_t var = 0; var < (count); ++var) { __VA_ARGS__ }               \
  } else {                                                                    \
    _Pragma("omp simd")                                                       \
    for (int64_t var = 0; var < (count); ++var) { __VA_ARGS__ }               \
  }
