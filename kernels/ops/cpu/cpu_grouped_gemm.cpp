// The CPU backend's grouped_gemm slot (backend.hpp): a grouped GEMM's groups (one per expert of a mixture). The gemm
// slot alone cuts each GEMM into one slice per thread, one OpenMP fork/join and one library call per slice, which
// on an expert's few hundred rows costs as much as the arithmetic; here the small groups instead run whole, one per
// thread, in one region for all of them (dynamic schedule, largest first), and the large ones through the gemm slot
// as before, sliced.
//
// Invariants: whether a group runs whole depends on its own shape only (m·n·k against kWholeMnk), never on the
// other groups, so a group's bits depend on its shape and the thread count only, as the gemm slot's do (the
// expert-parallel layouts, whose groups are ep 1's, keep ep 1's bits). Deterministic mode (GemmMode::kDeterministic)
// is unchanged bit for bit: its fixed slices run in order on the group's thread (gemm.cpp). The region is used only
// where no f32 view allocates (all f32 operands, or bf16 operands on a library with bf16 kernels, without a bias),
// so the threads share nothing but the library state, which is thread-safe (onednn_matmuls.hpp). No host memory
// per call: each group's first row and the order of the whole ones live in the run's kernel scratch
// (cpu_resources.hpp), which the gemm slot never leases.
#include <omp.h>

#include <algorithm>
#include <exception>

#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops::cpu_detail {
namespace {

// At or below this m·n·k a group runs whole on one thread (16 M: about 0.6 ms of f32 arithmetic on one Zen 4
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

void grouped_gemm(const Context& ctx, const GroupedGemmProblem& problem) {
  const auto gemm = detail::slot_of(ctx, &Backend::gemm, "gemm");
  const bool team = omp_get_max_threads() > 1 && !omp_in_parallel();
  const std::size_t groups = problem.rows.size();
  kc::ScratchFor scratch(cpu_scratch(ctx));
  const kc::KernelScratch::Lease lease = scratch.get().lease(2 * groups * sizeof(std::int64_t), 0);
  auto* first = reinterpret_cast<std::int64_t*>(lease.shared());  // [groups]: each group's first row
  std::int64_t* whole = first + groups;                              // the groups that run whole
  std::int64_t count = 0, row = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    first[g] = row;
    row += problem.rows[g];
    if (problem.rows[g] == 0) continue;
    const GemmProblem p = detail::group_gemm(ctx, problem, static_cast<std::int64_t>(g), first[g]);
    if (team && mnk(p) <= kWholeMnk && in_place(ctx, p)) {
      whole[count++] = static_cast<std::int64_t>(g);
    } else {
      gemm(ctx, p);
    }
  }
  if (count == 0) return;
  // Largest first: every group's m·n·k is its row count times the same factor (std::sort: no buffer, unlike
  // std::stable_sort; ties by group, so the order is a function of the rows).
  std::sort(whole, whole + count, [&](std::int64_t x, std::int64_t y) {
    const std::int64_t rx = problem.rows[static_cast<std::size_t>(x)], ry = problem.rows[static_cast<std::size_t>(y)];
    return rx != ry ? rx > ry : x < y;
  });
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      const std::int64_t g = whole[i];
      gemm(ctx, detail::group_gemm(ctx, problem, g, first[g]));
    } catch (...) {
#pragma omp critical(cleave_grouped_gemm_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cleave::ops::cpu_detail
