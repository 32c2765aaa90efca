// The layout tests' shared vocabulary (tests/e2e): the --set overrides that choose a layout (pp, tp, schedule)
// and the bounds a layout's run must meet against one rank. One copy, so every test states a layout and its bound
// in the same words and a bound changes in one place.
//
// Bounds (relative, per step for the losses and element-wise for the parameters unless said otherwise):
//   kRounding         float rounding: the same sums in another order (a tied table's copies, data parallel, ZeRO)
//   kTensorParallel   tensor parallel: every row-parallel GEMM's inner sum split into tp partial sums added by
//                     the all-reduce, and the vocab-parallel loss's log-sum-exp summed in pieces
//   kBf16TensorParallel, kBf16TensorParallelLoss  bf16 tensor parallel: per tensor max |diff| / max |value|, and
//                     the losses relative (Bound::scaled)
#pragma once

#include <string>

namespace cleave::testing {

inline constexpr double kRounding = 5e-6;
inline constexpr double kTensorParallel = 2e-5;
inline constexpr double kBf16TensorParallel = 3e-2;
inline constexpr double kBf16TensorParallelLoss = 1e-3;

inline std::string pp(int p) { return "parallel.pipeline_model_parallel_size=" + std::to_string(p); }
inline std::string tp(int t) { return "parallel.tensor_model_parallel_size=" + std::to_string(t); }
inline std::string schedule(const char* name) { return std::string("parallel.schedule=") + name; }

}  // namespace cleave::testing
