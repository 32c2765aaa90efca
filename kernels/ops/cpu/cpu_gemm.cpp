// The CPU backend's GEMM slot (contract in ops.hpp "GEMM"; sizes resolved by ops_gemm.cpp into a GemmProblem).
// GEMMs run on the library of device.blas (ctx.cpu_blas, resolved per operand dtype by cpu_blas.hpp's rule). f32
// operands, or bf16 ones on a library without bf16 kernels, go through f32 views (cpu_f32_view.hpp); bf16 operands
// on a library with bf16 kernels (oneDNN on bf16 instructions) are not widened: bf16 products, f32 accumulation,
// C rounded once. Invariant: deterministic mode (GemmMode::kDeterministic) slices every GEMM by shape
// (gemm_slicing), so its bits do not depend on the thread count. oneDNN runs with the run's primitives and
// scratchpads (ctx.resources, cpu_resources.hpp); a context without resources gets a set for the one call.
#include <optional>

#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

namespace {

// The library for this GEMM (device.blas; "auto" resolved per operand dtype by cpu_blas.hpp's rule).
CpuGemmChoice gemm_choice(const Context& ctx, bool bf16_operands) {
  return resolved_cpu_gemm(ctx.cpu_blas, bf16_operands);
}

kc::GemmBackend gemm_backend(CpuBlas library) {
  switch (library) {
    case CpuBlas::kBlis: return kc::GemmBackend::kBlis;
    case CpuBlas::kOneDnn: return kc::GemmBackend::kOneDnn;
    default: return kc::GemmBackend::kOpenBlas;
  }
}

// The library with its state: oneDNN's from the run's resources, or made in `local` for this call when the context
// carries none (the same primitives, so the same bits).
// A grouped GEMM's group (varying_shape) runs on oneDNN's primitive for any m and k (gemm_backend.hpp, GemmShape).
kc::GemmLibrary gemm_library(const Context& ctx, CpuBlas library, bool varying_shape,
                             std::optional<kc::OneDnnMatmuls>& local) {
  const kc::GemmBackend backend = gemm_backend(library);
  if (backend != kc::GemmBackend::kOneDnn) return {backend};
  CpuResources* resources = cpu_resources(ctx);
  return {backend, resources != nullptr ? &resources->onednn() : &local.emplace(),
          varying_shape ? kc::GemmShape::kVarying : kc::GemmShape::kExact};
}

// bf16 operands on a library with bf16 kernels: no widening; C written in its own dtype. A bias with alpha 1 and
// beta 0 (the forward of a Linear) goes to the library's epilogue: C = round(A B + bias) in one pass over C.
// Otherwise C goes through an f32 view when a bias follows (the bias is added in f32 and C rounded once).
void gemm_bf16_native(const Context& ctx, const GemmProblem& p, kc::GemmLibrary library) {
  const auto* a = cpu_detail::bf16_data(p.a);
  const auto* b = cpu_detail::bf16_data(p.b);
  const bool bias = p.epilogue == GemmEpilogue::kBias;
  kc::Bf16GemmOut out;
  if (bias && p.alpha == 1.0f && p.beta == 0.0f) {
    F32In bias_f32(ctx, p.bias);
    if (p.c.dtype() == DType::kF32) {
      out.f32 = p.c.data<float>();
    } else {
      out.bf16 = cpu_detail::bf16_data(p.c);
    }
    kc::gemm_bf16_strided_batched(library, p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a, p.lda, p.stride_a, b,
                                  p.ldb, p.stride_b, p.beta, out, p.ldc, p.stride_c, p.batch, slicing(ctx),
                                  bias_f32.get());
    return;
  }
  std::optional<F32Out> c_view;
  if (p.c.dtype() == DType::kF32) {
    out.f32 = p.c.data<float>();
  } else if (bias) {
    out.f32 = c_view.emplace(ctx, p.c, p.beta != 0.0f).get();
  } else {
    out.bf16 = cpu_detail::bf16_data(p.c);
  }
  kc::gemm_bf16_strided_batched(library, p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a, p.lda, p.stride_a, b, p.ldb,
                                p.stride_b, p.beta, out, p.ldc, p.stride_c, p.batch, slicing(ctx));
  if (bias) {
    F32In bias_f32(ctx, p.bias);
    kc::bias_add_forward(out.f32, bias_f32.get(), p.batch * p.m, p.n);
  }
}

}  // namespace

void gemm(const Context& ctx, const GemmProblem& p) {
  const CpuGemmChoice choice = gemm_choice(ctx, p.a.dtype() == DType::kBF16);
  std::optional<kc::OneDnnMatmuls> local;
  const kc::GemmLibrary library = gemm_library(ctx, choice.library, p.varying_shape, local);
  if (choice.bf16_kernels) {
    gemm_bf16_native(ctx, p, library);
    return;
  }
  F32In a(ctx, p.a), b(ctx, p.b);
  F32Out c(ctx, p.c, p.beta != 0.0f);
  if (p.batch == 1) {
    kc::gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a.get(), p.lda, b.get(), p.ldb, p.beta, c.get(), p.ldc,
             slicing(ctx), library);
  } else {
    kc::gemm_strided_batched(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a.get(), p.lda, p.stride_a, b.get(), p.ldb,
                             p.stride_b, p.beta, c.get(), p.ldc, p.stride_c, p.batch, slicing(ctx), library);
  }
  if (p.epilogue == GemmEpilogue::kBias) {
    F32In bias(ctx, p.bias);
    kc::bias_add_forward(c.get(), bias.get(), p.batch * p.m, p.n);
  }
}

}  // namespace cleave::ops::cpu_detail

namespace cleave::ops {

namespace {

// What "auto" looks at in this process (fixed per process): the GEMMs and every report of them read these facts.
const CpuBlasFacts& this_process_cpu_blas_facts() {
  static const CpuBlasFacts facts = build_cpu_blas_facts(kernels::cpu::onednn_bf16_instructions());
  return facts;
}

}  // namespace

CpuGemmChoice resolved_cpu_gemm(CpuBlas requested, bool bf16_operands) {
  return choose_cpu_gemm(requested, bf16_operands, this_process_cpu_blas_facts());
}

CpuGemmChoices resolved_cpu_gemms(CpuBlas requested) {
  return choose_cpu_gemms(requested, this_process_cpu_blas_facts());
}

std::string cpu_gemm_description(CpuBlas requested) {
  const CpuGemmChoices choices = resolved_cpu_gemms(requested);
  std::string libraries;
  for (const CpuBlas library : cpu_gemm_libraries(choices)) {
    if (!libraries.empty()) libraries += "; ";
    libraries += kernels::cpu::gemm_backend_description(cpu_detail::gemm_backend(library));
  }
  return describe_cpu_gemms(choices) + ": " + libraries;
}

}  // namespace cleave::ops
