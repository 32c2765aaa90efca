// The CPU backend's gemm_many slot (backend.hpp): independent GEMMs, such as a grouped GEMM's groups (one per
// expert of a mixture). The gemm slot alone cuts each GEMM into one slice per thread, one OpenMP fork/join and one
// library call per slice, which on an expert's few hundred rows costs as much as the arithmetic; here the small
// problems instead run whole, one per thread, in one region for all of them (dynamic schedule, largest first),
// and the large ones through the gemm slot as before, sliced.
//
// Invariants: whether a problem runs whole depends on its own shape only (m·n·k against kWholeMnk), never on the
// other problems, so a problem's bits depend on its shape and the thread count only, as the gemm slot's do (the
// expert-parallel layouts, whose groups are ep 1's, keep ep 1's bits). Deterministic mode (GemmMode::kDeterministic)
// is unchanged bit for bit: its fixed slices run in order on the problem's thread (gemm.cpp). The region is used
// only where no f32 view allocates (all f32 operands, or bf16 operands on a library with bf16 kernels, without a
// bias), so the threads share nothing but the library state, which is thread-safe (onednn_matmuls.hpp).
#include <omp.h>

#include <algorithm>
#include <exception>
#include <numeric>
#include <vector>

#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops::cpu_detail {
namespace {

// At or below this m·n·k a problem runs whole on one thread (16 M: about 0.6 ms of f32 arithmetic on one Zen 4
// core; an expert's 256 x 128 x 128 GEMM of the example moe is 4 M).
constexpr double kWholeMnk = 16.0 * 1024.0 * 1024.0;

double mnk(const GemmProblem& p) {
  return static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) * static_cast<double>(p.batch);
}

// The gemm slot reads these tensors in place (no f32 view, so nothing allocates on a thread of the region).
bool in_place(const Context& ctx, const GemmProblem& p) {
  if (p.epilogue != GemmEpilogue::kNone) return false;
  if (p.a.dtype() == DType::kF32) return p.b.dtype() == DType::kF32 && p.c.dtype() == DType::kF32;
  return resolved_cpu_gemm(ctx.cpu_blas, true).bf16_kernels;
}

}  // namespace

void gemm_many(const Context& ctx, std::span<const GemmProblem> problems) {
  const auto gemm = detail::slot_of(ctx, &Backend::gemm, "gemm");
  const bool team = omp_get_max_threads() > 1 && !omp_in_parallel();
  std::vector<std::size_t> whole;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    if (team && mnk(problems[i]) <= kWholeMnk && in_place(ctx, problems[i])) {
      whole.push_back(i);
    } else {
      gemm(ctx, problems[i]);
    }
  }
  if (whole.empty()) return;
  std::stable_sort(whole.begin(), whole.end(),
                   [&](std::size_t x, std::size_t y) { return mnk(problems[x]) > mnk(problems[y]); });
  std::exception_ptr failure;
  const auto count = static_cast<std::int64_t>(whole.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      gemm(ctx, problems[whole[static_cast<std::size_t>(i)]]);
    } catch (...) {
#pragma omp critical(cleave_gemm_many_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cleave::ops::cpu_detail
