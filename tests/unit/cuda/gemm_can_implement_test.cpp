// kernels/cuda/gemm.hpp's gemm_can_implement on the CPU (a pure check of the arguments; no GPU, no cuBLASLt call):
// the GELU aux epilogues are refused for f32 inputs with the reason and the unfused way out (cuBLASLt may have
// no algorithm for them: refused here, callers take the unfused path, instead of failing in the heuristic at
// run time), offered for bf16 inputs, and the plain, bias and GELU epilogues stay offered in f32. The pointers
// are never dereferenced, so host addresses stand in for device memory.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/gemm.hpp"

namespace cleave::testing::gemm_can_implement_test {
namespace {

namespace kc = kernels::cuda;
using kc::GemmEpilogue;

kc::GemmArgs args_for(GemmEpilogue epilogue, DType input, DType output) {
  static float storage[64];
  kc::GemmArgs args;
  args.m = 4;
  args.n = 8;
  args.k = 4;
  args.input_type = input;
  args.output_type = output;
  args.a = storage;
  args.lda = 4;
  args.b = storage;
  args.ldb = 8;
  args.c = storage;
  args.ldc = 8;
  args.epilogue = epilogue;
  args.bias = storage;
  args.aux = storage;
  args.ld_aux = 8;
  return args;
}

TEST(CudaGemmCanImplement, GeluAuxEpiloguesAreRefusedForF32Inputs) {
  for (const GemmEpilogue e : {GemmEpilogue::kGeluAux, GemmEpilogue::kBiasGeluAux, GemmEpilogue::kGeluBackward}) {
    const std::string name(kc::gemm_epilogue_name(e));
    const std::string why = kc::gemm_can_implement(args_for(e, DType::kF32, DType::kF32));
    EXPECT_NE(why.find("epilogue " + name + " with f32 inputs is not offered"), std::string::npos) << why;
    EXPECT_NE(why.find("gelu_forward / gelu_backward separately"), std::string::npos) << why;
    EXPECT_EQ(kc::gemm_can_implement(args_for(e, DType::kBF16, DType::kBF16)), "") << name;
    EXPECT_EQ(kc::gemm_can_implement(args_for(e, DType::kBF16, DType::kF32)), "") << name;
  }
}

TEST(CudaGemmCanImplement, PlainBiasAndGeluEpiloguesStayOfferedInF32) {
  for (const GemmEpilogue e : {GemmEpilogue::kNone, GemmEpilogue::kBias, GemmEpilogue::kGelu, GemmEpilogue::kBiasGelu}) {
    EXPECT_EQ(kc::gemm_can_implement(args_for(e, DType::kF32, DType::kF32)), "") << kc::gemm_epilogue_name(e);
    EXPECT_EQ(kc::gemm_can_implement(args_for(e, DType::kBF16, DType::kBF16)), "") << kc::gemm_epilogue_name(e);
  }
}

// The argument checks behind the refusal still run for bf16 (an aux leading dimension off a multiple of 8).
TEST(CudaGemmCanImplement, AuxLeadingDimensionIsStillCheckedForBf16) {
  kc::GemmArgs args = args_for(GemmEpilogue::kBiasGeluAux, DType::kBF16, DType::kF32);
  args.ld_aux = 12;
  EXPECT_NE(kc::gemm_can_implement(args).find("ld_aux 12 must be >= n 8 and a multiple of 8"), std::string::npos)
      << kc::gemm_can_implement(args);
}

}  // namespace
}  // namespace cleave::testing::gemm_can_implement_test
