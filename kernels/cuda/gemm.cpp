// cuBLASLt GEMM (gemm.hpp): the context with its plan and algorithm caches, the checks of gemm_can_implement, and
// the call. Row-major problems run as the column-major product C^T = op(B)^T op(A)^T: the operands swap places
// (gemm_plan.hpp builds the descriptors). Plans (descriptors + algorithm) are cached per problem key in the
// GemmContext's bounded caches; an algorithm is asked of cuBLASLt once per heuristic problem (gemm.hpp, "Plan
// caching").
#include "kernels/cuda/gemm.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm_plan.hpp"

namespace cleave::kernels::cuda {

using ::cleave::cuda::cublaslt;
namespace {

using gemm_plan::alignment_of;
using gemm_plan::has_aux;
using gemm_plan::has_bias;
using gemm_plan::Plan;
using gemm_plan::PlanKey;
using gemm_plan::plan_key;

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

[[noreturn]] void throw_no_algorithm(const GemmArgs& args, std::size_t workspace_bytes) {
  throw BackendError(fmt::format(
      "cuBLASLt has no algorithm for {} (pointer alignments A {} B {} C {}, workspace {} bytes); try aligned "
      "leading dimensions (multiples of 8 elements), another epilogue, or a larger workspace",
      args.str(), alignment_of(args.a), alignment_of(args.b), alignment_of(args.c), workspace_bytes));
}

// The heuristic's answer for one problem (an absent algorithm is remembered too, so it is asked once).
struct CachedAlgorithm {
  std::optional<cublasLtMatmulAlgo_t> algo;
};

}  // namespace

struct GemmContext::Impl {
  explicit Impl(GemmCacheCapacity capacity) : plans(capacity.plans), algorithms(capacity.algorithms) {}

  cublasLtHandle_t handle = nullptr;
  LruCache<PlanKey, std::unique_ptr<Plan>> plans;       // exact problems
  LruCache<PlanKey, CachedAlgorithm> algorithms;         // heuristic problems (and exact ones their bucket failed)
  std::uint64_t heuristic_queries = 0;
  std::uint64_t bucket_reused = 0;
  std::uint64_t bucket_rejected = 0;

  // The heuristic's answer for `args`, from the algorithm cache or one query (on `plan`, the descriptors of
  // `args`, or on new ones when it is null).
  const CachedAlgorithm& algorithm_for(const GemmArgs& args, const Plan* plan, std::size_t workspace_bytes) {
    const PlanKey key = plan_key(args, workspace_bytes);
    if (const CachedAlgorithm* hit = algorithms.find(key)) return *hit;
    std::unique_ptr<Plan> own;
    if (plan == nullptr) {
      own = gemm_plan::make_descriptors(args);
      plan = own.get();
    }
    ++heuristic_queries;
    return algorithms.insert(key,
                             CachedAlgorithm{gemm_plan::query_heuristic(handle, *plan, args, workspace_bytes)});
  }

  // A new plan for the exact problem `args`: its bucket's algorithm when cuBLASLt accepts it for the exact
  // descriptors, otherwise the exact problem's own.
  std::unique_ptr<Plan> make_plan(const GemmArgs& args, std::size_t workspace_bytes) {
    std::unique_ptr<Plan> plan = gemm_plan::make_descriptors(args);
    const GemmArgs heuristic = gemm_heuristic_problem(args);
    if (heuristic.m != args.m || heuristic.k != args.k) {
      const CachedAlgorithm& found = algorithm_for(heuristic, nullptr, workspace_bytes);
      if (found.algo && gemm_plan::algorithm_fits(handle, *plan, *found.algo, workspace_bytes)) {
        ++bucket_reused;
        plan->algo = *found.algo;
        plan->from_bucket = true;
        return plan;
      }
      ++bucket_rejected;
    }
    const CachedAlgorithm& exact = algorithm_for(args, plan.get(), workspace_bytes);
    if (!exact.algo) throw_no_algorithm(args, workspace_bytes);
    plan->algo = *exact.algo;
    return plan;
  }
};

GemmContext::GemmContext(GemmCacheCapacity capacity) : impl_(std::make_unique<Impl>(capacity)) {
  CLEAVE_CUBLAS_CHECK(cublaslt().create(&impl_->handle));
}

GemmContext::~GemmContext() {
  impl_->plans.clear();
  if (impl_->handle != nullptr) cublaslt().destroy(impl_->handle);
}

std::size_t GemmContext::plans_cached() const { return impl_->plans.size(); }

GemmCacheStats GemmContext::cache_stats() const {
  GemmCacheStats stats;
  stats.plans = impl_->plans.stats();
  stats.algorithms = impl_->algorithms.stats();
  stats.plans_cached = impl_->plans.size();
  stats.algorithms_cached = impl_->algorithms.size();
  stats.heuristic_queries = impl_->heuristic_queries;
  stats.bucket_reused = impl_->bucket_reused;
  stats.bucket_rejected = impl_->bucket_rejected;
  return stats;
}

std::int64_t gemm_heuristic_extent(std::int64_t extent) {
  if (extent <= 16) return extent;
  int log2_below = 0;  // floor(log2(extent - 1)) >= 4
  for (std::int64_t v = extent - 1; v > 1; v >>= 1) ++log2_below;
  const std::int64_t step = std::int64_t{1} << (log2_below - 2);
  return (extent + step - 1) / step * step;
}

GemmArgs gemm_heuristic_problem(const GemmArgs& args) {
  GemmArgs heuristic = args;
  if (args.batch != 1) return heuristic;
  const std::int64_t m = gemm_heuristic_extent(args.m);
  if (!args.trans_a || args.lda >= m) heuristic.m = m;  // A stored [k, m] needs lda >= m
  const std::int64_t k = gemm_heuristic_extent(args.k);
  if ((args.trans_a || args.lda >= k) && (!args.trans_b || args.ldb >= k)) heuristic.k = k;  // [m, k] / [n, k]
  return heuristic;
}
cublasLtHandle_t GemmContext::handle() const { return impl_->handle; }

std::string_view gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone:
      return "none";
    case GemmEpilogue::kBias:
      return "bias";
    case GemmEpilogue::kGelu:
      return "gelu";
    case GemmEpilogue::kBiasGelu:
      return "bias_gelu";
    case GemmEpilogue::kGeluAux:
      return "gelu_aux";
    case GemmEpilogue::kBiasGeluAux:
      return "bias_gelu_aux";
    case GemmEpilogue::kGeluBackward:
      return "gelu_backward";
  }
  return "?";
}

std::string GemmArgs::str() const {
  return fmt::format("gemm m={} n={} k={} {}->{} {}{} lda={} ldb={} ldc={} batch {} epilogue {}{}", m, n, k,
                     dtype_name(input_type), dtype_name(output_type), trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', lda,
                     ldb, ldc, batch, gemm_epilogue_name(epilogue), math == GemmMath::kTF32 ? " (tf32)" : "");
}

std::size_t gemm_workspace_size_max() { return kWorkspaceBytes; }

std::size_t gemm_workspace_size(const GemmArgs& args) {
  return (args.m == 0 || args.n == 0 || args.k == 0) ? 0 : kWorkspaceBytes;
}

std::string gemm_can_implement(const GemmArgs& args) {
  if (args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 1) {
    return fmt::format("sizes must be m, n, k >= 0 and batch >= 1, got m={} n={} k={} batch={}", args.m, args.n, args.k,
                       args.batch);
  }
  const bool f32_in = args.input_type == DType::kF32;
  const bool bf16_in = args.input_type == DType::kBF16;
  if (!(f32_in && args.output_type == DType::kF32) &&
      !(bf16_in && (args.output_type == DType::kBF16 || args.output_type == DType::kF32))) {
    return fmt::format("types {} -> {} are not supported; use f32 -> f32, bf16 -> bf16 or bf16 -> f32",
                       dtype_name(args.input_type), dtype_name(args.output_type));
  }
  if (args.math == GemmMath::kTF32 && !f32_in) return "TF32 math applies to f32 inputs only";
  const int64_t rows_a = args.trans_a ? args.k : args.m;
  const int64_t cols_a = args.trans_a ? args.m : args.k;
  const int64_t rows_b = args.trans_b ? args.n : args.k;
  const int64_t cols_b = args.trans_b ? args.k : args.n;
  if (args.lda < std::max<int64_t>(1, cols_a)) {
    return fmt::format("lda {} < {} (A is stored [{}, {}]{})", args.lda, std::max<int64_t>(1, cols_a), rows_a, cols_a,
                       args.trans_a ? ", transposed" : "");
  }
  if (args.ldb < std::max<int64_t>(1, cols_b)) {
    return fmt::format("ldb {} < {} (B is stored [{}, {}]{})", args.ldb, std::max<int64_t>(1, cols_b), rows_b, cols_b,
                       args.trans_b ? ", transposed" : "");
  }
  if (args.ldc < std::max<int64_t>(1, args.n)) {
    return fmt::format("ldc {} < {} (n = {})", args.ldc, std::max<int64_t>(1, args.n), args.n);
  }
  if (args.batch > 1 && (args.stride_a < 0 || args.stride_b < 0 || args.stride_c < 0)) {
    return fmt::format("negative batch strides a={} b={} c={}", args.stride_a, args.stride_b, args.stride_c);
  }
  if (args.batch > std::numeric_limits<int32_t>::max()) return fmt::format("batch {} exceeds int32", args.batch);
  if (args.m > 0 && args.n > 0 && args.c == nullptr) return "c is null";
  if (args.m > 0 && args.n > 0 && args.k > 0 && (args.a == nullptr || args.b == nullptr)) return "a or b is null";
  if (args.epilogue != GemmEpilogue::kNone) {
    if (args.k == 0) return fmt::format("k == 0 with epilogue {}", gemm_epilogue_name(args.epilogue));
    if (has_bias(args.epilogue) && args.bias == nullptr) {
      return fmt::format("epilogue {} needs a bias pointer", gemm_epilogue_name(args.epilogue));
    }
    if (has_aux(args.epilogue) && args.input_type == DType::kF32) {
      // cuBLASLt may hold no algorithm for them (never verified on a GPU): refuse here, where the caller can still
      // take the unfused path, rather than in the heuristic at run time.
      return fmt::format("epilogue {} with f32 inputs is not offered (cuBLASLt may have no algorithm for a GELU aux "
                         "epilogue in f32); run the GEMM with epilogue none or bias and apply gelu_forward / "
                         "gelu_backward separately, or use bf16 inputs",
                         gemm_epilogue_name(args.epilogue));
    }
    if (has_aux(args.epilogue)) {
      if (args.aux == nullptr)
        return fmt::format("epilogue {} needs an aux pointer", gemm_epilogue_name(args.epilogue));
      if (args.ld_aux < args.n || args.ld_aux % 8 != 0) {
        return fmt::format("ld_aux {} must be >= n {} and a multiple of 8 (cuBLASLt GELU aux)", args.ld_aux, args.n);
      }
      if (args.batch > 1)
        return fmt::format("epilogue {} with batch {} > 1", gemm_epilogue_name(args.epilogue), args.batch);
    }
  }
  return {};
}

void gemm(GemmContext& context, const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
          cudaStream_t stream) {
  const std::string refusal = gemm_can_implement(args);
  CLEAVE_CHECK(refusal.empty(), "{}: {}", args.str(), refusal);
  CLEAVE_CHECK(workspace_bytes == 0 || (workspace != nullptr && alignment_of(workspace) == 256),
               "{}: the workspace must be 256-byte aligned device memory", args.str());
  if (args.m == 0 || args.n == 0) return;
  if (args.k == 0) {
    CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_scale_matrix(args.c, args.output_type == DType::kBF16, args.m, args.n,
                                                         args.ldc, args.stride_c, args.batch, args.beta, stream),
                             "scale_matrix_kernel (gemm with k == 0)");
    return;
  }
  GemmContext::Impl& impl = *context.impl_;
  const PlanKey key = plan_key(args, workspace_bytes);
  std::unique_ptr<Plan>* cached = impl.plans.find(key);
  if (cached == nullptr) cached = &impl.plans.insert(key, impl.make_plan(args, workspace_bytes));
  Plan& plan = **cached;
  gemm_plan::set_epilogue_pointers(plan.desc, args);
  // cuBLASLt's A is our B and its B is our A (see the top of this file).
  const auto run = [&] {
    return cublaslt().matmul(impl.handle, plan.desc, &args.alpha, args.b, plan.layout_a, args.a, plan.layout_b,
                             &args.beta, args.c, plan.layout_c, args.c, plan.layout_c, &plan.algo, workspace,
                             workspace_bytes, stream);
  };
  cublasStatus_t status = run();
  if (status != CUBLAS_STATUS_SUCCESS && plan.from_bucket) {
    // cublasLtMatmulAlgoCheck's success "doesn't fully guarantee algo will run": the exact problem's own
    // algorithm from now on (a refusal is reported before anything is launched).
    ++impl.bucket_rejected;
    const CachedAlgorithm& exact = impl.algorithm_for(args, &plan, workspace_bytes);
    if (!exact.algo) throw_no_algorithm(args, workspace_bytes);
    plan.algo = *exact.algo;
    plan.from_bucket = false;
    status = run();
  }
  CLEAVE_VENDOR_CHECK("cuBLAS", status, status == CUBLAS_STATUS_SUCCESS, cublaslt().get_status_string(status),
                      fmt::format("cublasLtMatmul for {}", args.str()));
}

}  // namespace cleave::kernels::cuda
