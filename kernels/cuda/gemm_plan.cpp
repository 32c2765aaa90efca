// cuBLASLt plans for the GEMM (gemm_plan.hpp): descriptors and matrix layouts of one problem, its cache key, the
// heuristic query and the algorithm check. Invariant: each row-major matrix is read as its column-major transpose
// with the same leading dimension, so no data moves.
#include "kernels/cuda/gemm_plan.hpp"

#include <utility>

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda::gemm_plan {

using ::cleave::cuda::cublaslt;
namespace {

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kGelu:
      return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::kBiasGelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::kGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kBiasGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kGeluBackward:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  CLEAVE_ASSERT(false, "bad gemm epilogue {}", static_cast<int>(e));
}

cudaDataType_t lt_type(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  CLEAVE_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(desc, attribute, &value, sizeof value));
}

cublasLtMatrixLayout_t make_layout(DType type, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CLEAVE_CUBLAS_CHECK(cublaslt().matrix_layout_create(&layout, lt_type(type), static_cast<uint64_t>(rows),
                                                      static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    CLEAVE_CUBLAS_CHECK(
        cublaslt().matrix_layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    CLEAVE_CUBLAS_CHECK(cublaslt().matrix_layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                               &stride, sizeof stride));
  }
  return layout;
}

}  // namespace

bool has_bias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kBiasGelu || e == GemmEpilogue::kBiasGeluAux;
}
bool has_aux(GemmEpilogue e) {
  return e == GemmEpilogue::kGeluAux || e == GemmEpilogue::kBiasGeluAux || e == GemmEpilogue::kGeluBackward;
}

int64_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && address % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  return align;
}

PlanKey plan_key(const GemmArgs& args, std::size_t workspace_bytes) {
  return {args.trans_a,
          args.trans_b,
          args.m,
          args.n,
          args.k,
          args.lda,
          args.ldb,
          args.ldc,
          args.stride_a,
          args.stride_b,
          args.stride_c,
          args.batch,
          static_cast<int64_t>(args.input_type),
          static_cast<int64_t>(args.output_type),
          static_cast<int64_t>(args.epilogue),
          args.ld_aux,
          static_cast<int64_t>(args.math),
          alignment_of(args.a),
          alignment_of(args.b),
          alignment_of(args.c),
          has_bias(args.epilogue) ? alignment_of(args.bias) : 0,
          has_aux(args.epilogue) ? alignment_of(args.aux) : 0,
          static_cast<int64_t>(workspace_bytes),
          0};
}

void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const GemmArgs& args) {
  if (has_bias(args.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
  if (has_aux(args.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux);
}

std::unique_ptr<Plan> make_descriptors(const GemmArgs& args) {
  auto plan = std::make_unique<Plan>();
  const cublasComputeType_t compute = args.math == GemmMath::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CLEAVE_CUBLAS_CHECK(cublaslt().matmul_desc_create(&plan->desc, compute, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(args.epilogue));
  if (has_aux(args.epilogue)) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, args.ld_aux);
  set_epilogue_pointers(plan->desc, args);  // the heuristic reads their alignment

  plan->layout_a = make_layout(args.input_type, args.trans_b ? args.k : args.n, args.trans_b ? args.n : args.k,
                               args.ldb, args.batch, args.stride_b);
  plan->layout_b = make_layout(args.input_type, args.trans_a ? args.m : args.k, args.trans_a ? args.k : args.m,
                               args.lda, args.batch, args.stride_a);
  plan->layout_c = make_layout(args.output_type, args.n, args.m, args.ldc, args.batch, args.stride_c);
  return plan;
}

std::optional<cublasLtMatmulAlgo_t> query_heuristic(cublasLtHandle_t handle, const Plan& plan, const GemmArgs& args,
                                                    std::size_t workspace_bytes) {
  cublasLtMatmulPreference_t preference = nullptr;
  CLEAVE_CUBLAS_CHECK(cublaslt().matmul_preference_create(&preference));
  struct PreferenceGuard {
    cublasLtMatmulPreference_t p;
    ~PreferenceGuard() { cublaslt().matmul_preference_destroy(p); }
  } preference_guard{preference};
  const auto max_workspace = static_cast<uint64_t>(workspace_bytes);
  CLEAVE_CUBLAS_CHECK(cublaslt().matmul_preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &max_workspace, sizeof max_workspace));
  const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, const void*>, 4> alignments = {{
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, args.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, args.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, args.c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, args.c},
  }};
  for (const auto& [attribute, pointer] : alignments) {
    const auto align = static_cast<uint32_t>(alignment_of(pointer));
    CLEAVE_CUBLAS_CHECK(cublaslt().matmul_preference_set_attribute(preference, attribute, &align, sizeof align));
  }

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // "Not supported" is how cuBLASLt may say "no algorithm": the caller reports it with the problem.
  const cublasStatus_t status = cublaslt().matmul_algo_get_heuristic(
      handle, plan.desc, plan.layout_a, plan.layout_b, plan.layout_c, plan.layout_c, preference, 1, &result, &found);
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
    CLEAVE_VENDOR_CHECK("cuBLAS", status, status == CUBLAS_STATUS_SUCCESS, cublaslt().get_status_string(status),
                        "cublasLtMatmulAlgoGetHeuristic");
  }
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return std::nullopt;
  return result.algo;
}

bool algorithm_fits(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                    std::size_t workspace_bytes) {
  cublasLtMatmulHeuristicResult_t result{};
  const cublasStatus_t status = cublaslt().matmul_algo_check(handle, plan.desc, plan.layout_a, plan.layout_b,
                                                             plan.layout_c, plan.layout_c, &algo, &result);
  return status == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= workspace_bytes;
}

}  // namespace cleave::kernels::cuda::gemm_plan
