// Internal to the CPU backend (kernels/ops/cpu): what its slot files share and the slots each defines, which
// cpu_backend.cpp puts in the table. One file per op family, as the seam's ops_*.cpp: cpu_gemm.cpp,
// cpu_elementwise.cpp, cpu_nn.cpp, cpu_attention.cpp, cpu_llama.cpp, cpu_moe.cpp, cpu_loss.cpp, cpu_optim.cpp.
//
// Invariants: a slot is called only after the public op checked its arguments (backend.hpp), and has finished
// its work when it returns. Arithmetic is the f32 kernels' of kernels/cpu: bf16 tensors are widened and narrowed
// at the kernel edges (cpu_f32_view.hpp) or a cache-sized chunk at a time (cpu_chunked_view.hpp), with the same
// bits either way, so results match the f32 kernels on the same (rounded) inputs. Whole-tensor scratch comes from
// ctx.allocator (kWorkspace) and is returned before the slot returns; chunk and row buffers, tables and per-row
// partials a kernel keeps between calls are the run's KernelScratch (cpu_scratch(ctx), cpu_resources.hpp), never a
// static or a thread_local.
//
// Adding a slot: define it in its family's file, declare it here under that file, and name it in the table.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "engine/core/tensor.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/ops/backend.hpp"

namespace cleave::ops::cpu_detail {

namespace kc = kernels::cpu;

// The input and output pointer arrays of a run_chunked kernel (cpu_chunked_view.hpp), by count.
using In1 = std::array<const float*, 1>;
using In2 = std::array<const float*, 2>;
using In3 = std::array<const float*, 3>;
using Out1 = std::array<float*, 1>;
using Out2 = std::array<float*, 2>;

// How a GEMM (and the convolution's GEMMs) is split over threads: by shape in deterministic mode, so its bits do
// not depend on the thread count; per thread otherwise.
inline kc::GemmSlicing slicing(const Context& ctx) {
  return ctx.gemm_mode == GemmMode::kDeterministic ? kc::GemmSlicing::kShapeFixed : kc::GemmSlicing::kPerThread;
}

// ---- cpu_gemm.cpp --------------------------------------------------------------------------------------------
void gemm(const Context& ctx, const GemmProblem& p);

// ---- cpu_grouped_gemm.cpp ------------------------------------------------------------------------------------
void grouped_gemm(const Context& ctx, const GroupedGemmProblem& problem);

// ---- cpu_elementwise.cpp -------------------------------------------------------------------------------------
void fill(const Context& ctx, const Tensor& t, float value);
void copy(const Context& ctx, const Tensor& src, const Tensor& dst);
void copy_2d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy2d& s);
void copy_3d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy3d& s);
void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void add_inplace(const Context& ctx, const Tensor& y, const Tensor& x);
void scale_inplace(const Context& ctx, const Tensor& y, float alpha);
void scale_inplace_many(const Context& ctx, std::span<const Tensor> ys, float alpha);
void axpy(const Context& ctx, float alpha, const Tensor& x, const Tensor& y);
double sum_squares(const Context& ctx, const Tensor& x);
double sum_squares_many(const Context& ctx, std::span<const Tensor> xs);
kernels::ExactSquareSum sum_squares_exact(const Context& ctx, std::span<const Tensor> xs);
void bias_add_forward(const Context& ctx, const Tensor& y, const Tensor& bias);
void bias_backward(const Context& ctx, const Tensor& dy, const Tensor& dbias);
void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void gelu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx);
void relu_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void relu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx);
void softmax_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void softmax_backward(const Context& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx);

// ---- cpu_nn.cpp ----------------------------------------------------------------------------------------------
void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps);
void layernorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx);
void layernorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta);
void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range);
void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range);
void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos);
void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos);
void conv2d_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Conv2dParams& params);
void conv2d_backward_input(const Context& ctx, const Tensor& dy, const Tensor& weight, const Tensor& dx,
                           const Conv2dParams& params);
void conv2d_backward_weight(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dweight,
                            const Tensor& dbias, const Conv2dParams& params);
void maxpool2d_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& argmax, std::int64_t window,
                       std::int64_t stride);
void maxpool2d_backward(const Context& ctx, const Tensor& dy, const Tensor& argmax, const Tensor& dx,
                        std::int64_t window, std::int64_t stride);

// ---- cpu_attention.cpp ---------------------------------------------------------------------------------------
void attention_forward(const Context& ctx, const AttentionProblem& p);
void attention_backward(const Context& ctx, const AttentionProblem& p);
void attention_merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                     const Tensor& lse_b, const Tensor& out, const Tensor& lse);

// ---- cpu_llama.cpp -------------------------------------------------------------------------------------------
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps);
void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx);
void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight);
void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& out, const Tensor& rstd, float eps);
void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr);
void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h);
void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup);
void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params);
void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params);

// ---- cpu_moe.cpp ---------------------------------------------------------------------------------------------
void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out);
void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out);
void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight);

// ---- cpu_loss.cpp --------------------------------------------------------------------------------------------
void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           const Tensor& loss);
void cross_entropy_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, const VocabRange& range);
void cross_entropy_shard_max(const Context& ctx, const Tensor& logits, const VocabRange& range, const Tensor& row_max);
void cross_entropy_shard_sum_exp_and_target(const Context& ctx, const Tensor& logits, const Tensor& targets,
                                            const VocabRange& range, const Tensor& row_max, const Tensor& sums);
void cross_entropy_loss(const Context& ctx, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                        const Tensor& lse, const Tensor& loss);
void cross_entropy_shard_argmax(const Context& ctx, const Tensor& logits, const VocabRange& range,
                                const Tensor& row_max, const Tensor& neg_index);
CorrectCount count_correct(const Context& ctx, const Tensor& neg_index, const Tensor& targets);

// ---- cpu_optim.cpp -------------------------------------------------------------------------------------------
void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h);
void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& h);
void adamw_update_many(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& h);
void sgd_update_many(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& h);

}  // namespace cleave::ops::cpu_detail
