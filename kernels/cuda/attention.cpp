// Causal attention (attention.hpp): host orchestration only, per batch entry three (forward) or four plus the
// softmax backward (backward) launches. Batch entries are a loop, not a GEMM batch dimension: entry b of head h
// starts at b*T*3C + h*hd, which is not i*stride for one stride over i = b*H + h unless T*3C == H*hd.
#include "kernels/cuda/attention.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cuda/softmax.hpp"

namespace cleave::kernels::cuda {
namespace {

constexpr std::size_t kAlign = 256;  // cuBLASLt's preferred pointer alignment for the workspace matrices

std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::size_t square_bytes(const AttentionShape& s, std::size_t element) {
  return aligned(static_cast<std::size_t>(s.heads * s.seq * s.seq) * element);
}

void check_shape(const char* op, const AttentionShape& s, DType dtype) {
  CLEAVE_ASSERT(s.batch >= 0 && s.seq >= 0 && s.heads > 0 && s.head_dim > 0, "cuda {}: bad shape B={} T={} H={} hd={}",
                op, s.batch, s.seq, s.heads, s.head_dim);
  CLEAVE_ASSERT(dtype == DType::kF32 || dtype == DType::kBF16, "cuda {}: dtype {} is not f32 or bf16", op,
                dtype_name(dtype));
}

const char* at(const void* base, int64_t elements, std::size_t element) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(element);
}
char* at(void* base, int64_t elements, std::size_t element) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(element);
}

// One head-batched GEMM: C_h = op(A_h) op(B_h) for h < heads, each operand a row-major [rows, cols] view with
// leading dimension ld and head stride `stride` (elements).
struct Operand {
  const void* data;
  int64_t ld;
  int64_t stride;
};

void head_gemm(GemmContext& context, DType in, DType out, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               Operand a, Operand b, void* c, int64_t ldc, int64_t stride_c, int64_t heads, void* gemm_workspace,
               std::size_t gemm_workspace_bytes, cudaStream_t stream) {
  GemmArgs args;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.m = m;
  args.n = n;
  args.k = k;
  args.input_type = in;
  args.output_type = out;
  args.a = a.data;
  args.lda = a.ld;
  args.stride_a = a.stride;
  args.b = b.data;
  args.ldb = b.ld;
  args.stride_b = b.stride;
  args.c = c;
  args.ldc = ldc;
  args.stride_c = stride_c;
  args.batch = heads;
  args.math = GemmMath::kStrict;
  gemm(context, args, gemm_workspace, gemm_workspace_bytes, stream);
}

}  // namespace

std::size_t attention_forward_workspace_size(const AttentionShape& shape, DType dtype) {
  return dtype == DType::kBF16 ? square_bytes(shape, sizeof(float)) : 0;
}

std::size_t attention_backward_workspace_size(const AttentionShape& shape, DType dtype) {
  return square_bytes(shape, sizeof(float)) + (dtype == DType::kBF16 ? square_bytes(shape, 2) : 0);
}

void attention_forward(GemmContext& gemm_context, DType dtype, const void* qkv, void* out, void* probs,
                       const AttentionShape& shape, void* workspace, std::size_t workspace_bytes, void* gemm_workspace,
                       std::size_t gemm_workspace_bytes, cudaStream_t stream) {
  check_shape("attention_forward", shape, dtype);
  const std::size_t needed = attention_forward_workspace_size(shape, dtype);
  CLEAVE_ASSERT(workspace_bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda attention_forward: workspace of {} bytes, {} needed", workspace_bytes, needed);
  const int64_t T = shape.seq, H = shape.heads, hd = shape.head_dim, C = H * hd, ld_qkv = 3 * C;
  if (T == 0) return;
  const std::size_t es = dtype_size(dtype);
  const bool bf16 = dtype == DType::kBF16;
  const FloatType type = bf16 ? FloatType::kBF16 : FloatType::kF32;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t b = 0; b < shape.batch; ++b) {
    const void* q = at(qkv, b * T * ld_qkv, es);
    void* probs_b = at(probs, b * H * T * T, es);
    float* scores = bf16 ? static_cast<float*>(workspace) : static_cast<float*>(probs_b);
    // S_h = Q_h K_h^T (f32 out), then the scaled causal softmax into probs (in place for f32).
    head_gemm(gemm_context, dtype, DType::kF32, false, true, T, T, hd, {q, ld_qkv, hd}, {at(q, C, es), ld_qkv, hd},
              scores, T, T * T, H, gemm_workspace, gemm_workspace_bytes, stream);
    causal_softmax_forward(scores, Floats(probs_b, type), H * T, T, scale, stream);
    // O_h = P_h V_h, straight into head h's column block of out.
    head_gemm(gemm_context, dtype, dtype, false, false, T, hd, T, {probs_b, T, T * T}, {at(q, 2 * C, es), ld_qkv, hd},
              at(out, b * T * C, es), C, hd, H, gemm_workspace, gemm_workspace_bytes, stream);
  }
}

void attention_backward(GemmContext& gemm_context, DType dtype, const void* dout, const void* qkv, const void* probs,
                        void* dqkv, const AttentionShape& shape, void* workspace, std::size_t workspace_bytes,
                        void* gemm_workspace, std::size_t gemm_workspace_bytes, cudaStream_t stream) {
  check_shape("attention_backward", shape, dtype);
  const std::size_t needed = attention_backward_workspace_size(shape, dtype);
  CLEAVE_ASSERT(workspace_bytes >= needed && workspace != nullptr,
                "cuda attention_backward: workspace of {} bytes, {} needed", workspace_bytes, needed);
  const int64_t T = shape.seq, H = shape.heads, hd = shape.head_dim, C = H * hd, ld_qkv = 3 * C;
  if (T == 0) return;
  const std::size_t es = dtype_size(dtype);
  const bool bf16 = dtype == DType::kBF16;
  const FloatType type = bf16 ? FloatType::kBF16 : FloatType::kF32;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto* dp = static_cast<float*>(workspace);
  // dS: in place over dP for f32; its own bf16 block (after dP's) for bf16, the operand type of the GEMMs.
  void* ds = bf16 ? at(workspace, static_cast<int64_t>(square_bytes(shape, sizeof(float))), 1) : workspace;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const void* q = at(qkv, b * T * ld_qkv, es);
    const void* p = at(probs, b * H * T * T, es);
    const void* dout_b = at(dout, b * T * C, es);
    void* dq = at(dqkv, b * T * ld_qkv, es);
    // dP_h = dO_h V_h^T (f32 out); dV_h = P_h^T dO_h.
    head_gemm(gemm_context, dtype, DType::kF32, false, true, T, T, hd, {dout_b, C, hd}, {at(q, 2 * C, es), ld_qkv, hd},
              dp, T, T * T, H, gemm_workspace, gemm_workspace_bytes, stream);
    head_gemm(gemm_context, dtype, dtype, true, false, T, hd, T, {p, T, T * T}, {dout_b, C, hd}, at(dq, 2 * C, es),
              ld_qkv, hd, H, gemm_workspace, gemm_workspace_bytes, stream);
    // dS = P * (dP - rowsum(P * dP)) * scale (exact zeros above the diagonal).
    causal_softmax_backward(ConstFloats(p, type), dp, Floats(ds, type), H * T, T, scale, stream);
    // dQ_h = dS_h K_h; dK_h = dS_h^T Q_h.
    head_gemm(gemm_context, dtype, dtype, false, false, T, hd, T, {ds, T, T * T}, {at(q, C, es), ld_qkv, hd}, dq,
              ld_qkv, hd, H, gemm_workspace, gemm_workspace_bytes, stream);
    head_gemm(gemm_context, dtype, dtype, true, false, T, hd, T, {ds, T, T * T}, {q, ld_qkv, hd}, at(dq, C, es), ld_qkv,
              hd, H, gemm_workspace, gemm_workspace_bytes, stream);
  }
}

}  // namespace cleave::kernels::cuda
