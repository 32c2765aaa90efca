// Internal to the cuBLASLt GEMM (gemm.hpp): a problem's plan, the cuBLASLt descriptors of one exact problem and the
// algorithm it runs, with the key plans and algorithms are cached by, and the two questions asked of cuBLASLt (its
// heuristic's best algorithm, and whether an algorithm found for another problem runs this one).
//
// Invariant: the key holds everything the descriptors and the heuristic depend on (sizes, leading dimensions,
// strides, types, epilogue, math, pointer alignments, workspace), so two problems with one key share a plan. The
// row-major problem runs as the column-major product C^T = op(B)^T op(A)^T: cuBLASLt's A is our B and its B is our A.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "engine/cuda/cublaslt_library.hpp"
#include "kernels/cuda/gemm.hpp"

namespace cleave::kernels::cuda::gemm_plan {

bool has_bias(GemmEpilogue e);
bool has_aux(GemmEpilogue e);

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume about the pointer.
int64_t alignment_of(const void* p);

using PlanKey = std::array<int64_t, 24>;

PlanKey plan_key(const GemmArgs& args, std::size_t workspace_bytes);

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t layout_c = nullptr;  // C and D
  cublasLtMatmulAlgo_t algo{};
  bool from_bucket = false;  // algo was found for the heuristic problem (gemm_heuristic_problem), not this one

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (layout_c != nullptr) ::cleave::cuda::cublaslt().matrix_layout_destroy(layout_c);
    if (layout_b != nullptr) ::cleave::cuda::cublaslt().matrix_layout_destroy(layout_b);
    if (layout_a != nullptr) ::cleave::cuda::cublaslt().matrix_layout_destroy(layout_a);
    if (desc != nullptr) ::cleave::cuda::cublaslt().matmul_desc_destroy(desc);
  }
};

// The bias and aux pointers of `args` set on `desc` (per call: the plan is shared by problems with other pointers).
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const GemmArgs& args);

// The exact problem's descriptors (the algorithm is filled in by the caller).
std::unique_ptr<Plan> make_descriptors(const GemmArgs& args);

// cuBLASLt's best algorithm for `plan`'s descriptors with `args`' pointer alignments, or none.
std::optional<cublasLtMatmulAlgo_t> query_heuristic(cublasLtHandle_t handle, const Plan& plan, const GemmArgs& args,
                                                    std::size_t workspace_bytes);

// Whether cuBLASLt accepts `algo` (found for another problem of the same bucket) on `plan`'s exact descriptors
// with a workspace of at most `workspace_bytes` (cublasLtMatmulAlgoCheck: a refusal means it would not run).
bool algorithm_fits(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                    std::size_t workspace_bytes);

}  // namespace cleave::kernels::cuda::gemm_plan
