// THE SEAM (docs/architecture.md): device-generic ops over Tensors. Layers, optimizers, gradient clipping and
// accumulation, data parallel, the executor and the trainer reach compute only through these functions;
// none of them includes kernels/cpu or kernels/cuda.
//
// Every op:
//  - checks its arguments once, here, for every backend (defined tensors, one device = ctx.device, dtypes,
//    matching shapes), naming the op and the tensors in the message;
//  - then calls its slot in the backend of ctx.device (backend.hpp). A backend without the op throws
//    "<op> is not implemented on cuda:N" (never a silent CPU fallback);
//  - is enqueued on ctx.stream: on the CPU it has finished when it returns; on a GPU it has not, and the
//    caller synchronises through the stream or an event. Ops marked "(host value)" return a number to the
//    host and so wait for the stream: keep them out of steady-state step code except where the value is
//    needed anyway (the gradient norm for clipping). Each such call is counted in the run's Context::host_waits
//    (host_waits.hpp), so a test can hold a steady-state step to its few waits;
//  - takes scratch from ctx.allocator (kWorkspace) and returns it before it returns.
// Convention (llm.c): activations are written (=), parameter gradients accumulated (+=), as each op says.
// Floating tensors are f32 or bf16 (mixed precision; kernels accumulate in f32) unless an op says f32;
// integer tensors (token ids, targets, arg-max) are i32.
//
// Adding an op: declare it here, add its slot to Backend (backend.hpp), write the checks and the dispatch in
// the ops_*.cpp of its family, a CPU slot in cpu/cpu_<family>.cpp, a CUDA slot where a kernel exists, and a test
// against the CPU twin (tests/unit/ops). docs/ops.md walks through it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/core/tensor.hpp"
#include "kernels/exact_square_sum.hpp"
#include "kernels/ops/context.hpp"

namespace cleave::ops {

// Per-device handles for `device` (the CUDA backend's cuBLASLt context and workspace; the CPU backend's oneDNN
// primitives and scratchpads); the run owns them and puts them in Context::resources. Throws when this build
// cannot serve the device.
std::unique_ptr<DeviceResources> make_device_resources(Device device);

// ---- GEMM ------------------------------------------------------------------------------------------------
// C = alpha * op(A) * op(B) + beta * C, then the epilogue. Each operand is a stack of `batch` row-major
// matrices: with batch 1, a tensor of shape [..., cols] is the matrix [numel / cols, cols]; with batch > 1, a
// tensor of rank >= 3 is [batch, rows..., cols] and a rank-2 tensor is one matrix broadcast to every entry.
// op(A) is m x k, op(B) is k x n, C is m x n. beta == 0 never reads C. kBias adds bias[n] (C's dtype or f32)
// to every row after the product. A and B share a dtype (f32 or bf16); C may be f32 or bf16.
enum class GemmEpilogue { kNone, kBias };
struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  std::int64_t batch = 1;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  Tensor bias;  // kBias only
};
void gemm(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options = {});

// ---- Mixture of experts: grouped GEMMs and token routing --------------------------------------------------
// Grouped GEMM, one GEMM per expert (group): `groups` (host) lists the rows of each group, in order; they sum
// to the rows of the grouped operands. Groups of 0 rows are skipped (their C is left as it is). Each group is
// one GEMM (same dtypes, same determinism as gemm()), the groups handed together to the backend's grouped_gemm slot
// (backend.hpp: the CPU runs the small ones whole, one per thread of one region), so the op serves every device.
//   grouped_gemm:             C_g = alpha · A_g · op(B[g]) + beta · C_g; A [rows, k] and C [rows, n] in
//                             consecutive row blocks A_g, C_g; B [G, k, n] (trans_b: [G, n, k]).
//   grouped_gemm_weight_grad: C[g] = alpha · A_g^T · B_g + beta · C[g]; A [rows, m], B [rows, n] in row
//                             blocks; C [G, m, n] (a weight gradient: beta 1 accumulates).
struct GroupedGemmOptions {
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};
void grouped_gemm(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                  std::span<const std::int64_t> groups, const GroupedGemmOptions& options = {});
void grouped_gemm_weight_grad(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                              std::span<const std::int64_t> groups, const GroupedGemmOptions& options = {});
// Routing: R routed rows (token-expert pairs, grouped per expert) of N tokens [N, D], each token in k rows.
// moe_gather: out[r, :] = scale[r] · x[index[r], :] (written); index [R] i32 in [0, N); scale [R] f32, or
// undefined for 1. The dispatch of tokens to their experts' rows (and, scaled, the combine's backward).
void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out);
// moe_combine: out[n, :] = Σ_{j<k} weight[n, j] · src[rows[n, j], :] (written, j in order: deterministic);
// src [R, D], rows [N, k] i32 in [0, R), weight [N, k] f32 or undefined for 1, out [N, D].
void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out);
// dweight[n, j] = Σ_c dy[n, c] · src[rows[n, j], c] (f32 [N, k], written): the combine's weight gradient.
void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight);

// ---- Element-wise and bias -------------------------------------------------------------------------------
void fill(const Context& ctx, const Tensor& t, float value);            // every element := value (float dtypes)
void copy(const Context& ctx, const Tensor& src, const Tensor& dst);    // same numel; f32 <-> bf16 converts
// Strided 2D copy (cudaMemcpy2D's shape), in elements of the one dtype src and dst share: for r < rows and
// c < cols, dst[dst_offset + r·dst_stride + c] = src[src_offset + r·src_stride + c]. Every row must lie
// inside its tensor (checked); src and dst must not overlap. What packs head blocks for context parallelism.
struct Copy2d {
  std::int64_t rows = 0, cols = 0;
  std::int64_t src_offset = 0, src_stride = 0;
  std::int64_t dst_offset = 0, dst_stride = 0;
};
void copy_2d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy2d& shape);
// Strided 3D copy: `batches` blocks of copy_2d's shape, each side's block b starting b·batch_stride elements after
// its block 0: for b < batches, r < rows, c < cols,
//   dst[dst_offset + b·dst_batch_stride + r·dst_row_stride + c] =
//       src[src_offset + b·src_batch_stride + r·src_row_stride + c],
// in one dtype (the bytes moved) or converted f32 <-> bf16 (rounded to nearest even / widened exactly: copy's bits).
// One launch per call on a GPU: ring attention's chunk of every sample at once, widened or rounded on the way.
// Every element must lie inside its tensor, row strides >= cols and, for batches > 1, dst_batch_stride >=
// (rows - 1)·dst_row_stride + cols, so no two writes land on one element (checked); src and dst must not overlap.
struct Copy3d {
  std::int64_t batches = 0, rows = 0, cols = 0;
  std::int64_t src_offset = 0, src_batch_stride = 0, src_row_stride = 0;
  std::int64_t dst_offset = 0, dst_batch_stride = 0, dst_row_stride = 0;
};
void copy_3d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy3d& shape);
void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);  // out = a + b
void add_inplace(const Context& ctx, const Tensor& y, const Tensor& x);             // y += x
void scale_inplace(const Context& ctx, const Tensor& y, float alpha);              // y *= alpha
// scale_inplace on every tensor of ys, bit for bit as on each in turn at any thread count (the gradient clip: one
// OpenMP team on the CPU instead of one per tensor, issue 39). The tensors must not overlap.
void scale_inplace_many(const Context& ctx, std::span<const Tensor> ys, float alpha);
void axpy(const Context& ctx, float alpha, const Tensor& x, const Tensor& y);      // y += alpha * x
double sum_squares(const Context& ctx, const Tensor& x);  // sum x^2 in double (host value)
// Sum over xs of sum_squares(x), each term exactly as sum_squares computes it, added in the order given:
// ((0 + s0) + s1) + ... (host value, ONE wait however many tensors: the gradient norm). Empty: 0.
double sum_squares_many(const Context& ctx, std::span<const Tensor> xs);
// Σ over xs of Σ x² as an exact fixed-point sum (kernels/exact_square_sum.hpp): the same digits for any order
// and any split of the elements over tensors, threads or ranks (the gradient norm: layout-independent bits).
// Host value, ONE wait however many tensors (counted as a sum_squares_many wait). Empty: 0.
kernels::ExactSquareSum sum_squares_exact(const Context& ctx, std::span<const Tensor> xs);
// y[r, :] += bias for every row r of y [..., cols]; dbias += sum over rows of dy (dbias f32).
void bias_add_forward(const Context& ctx, const Tensor& y, const Tensor& bias);
void bias_backward(const Context& ctx, const Tensor& dy, const Tensor& dbias);

// ---- Activations and normalisation -----------------------------------------------------------------------
// y = gelu(x) (tanh approximation) / relu(x); backward: dx = dy * f'(x). Outputs may alias inputs.
void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void gelu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx);
void relu_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void relu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx);
// Row-wise softmax over the last dimension; backward dx = y * (dy - sum(dy * y)).
void softmax_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void softmax_backward(const Context& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx);
// LayerNorm over the last dimension (cols): y, mean[rows] and rstd[rows] (f32 statistics) are written;
// backward_input overwrites dx; backward_weight ACCUMULATES into dgamma and dbeta (f32).
void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps);
void layernorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx);
void layernorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta);

// ---- Attention ----------------------------------------------------------------------------------------
// Memory-efficient multi-head attention (FlashAttention-2's blockwise algorithm with an online softmax): the
// forward keeps the output and the per-row log-sum-exp, never the [T, T] probabilities; the backward
// recomputes them block by block from q, k and the saved lse. docs/ops.md ("Attention") has the math.
//
// Shapes (B batch, Tq queries, Tk keys, hd head dim, head h at columns h*hd):
//   q, out, dout, dq [B, Tq, Hq*hd];  k, v, dk, dv [B, Tk, Hkv*hd];  lse [B, Hq, Tq] (always f32).
//   Query head h reads key/value head h / (Hq / Hkv) (grouped-query attention; Hkv divides Hq).
// Visibility: query row i sits at global position pi = q_offset + i, key row j at pj = k_offset + j; key j
// is visible to query i iff (not causal or pj <= pi) and (window <= 0 or pi - pj < window). Offsets let a
// chunk of queries attend a chunk of keys (ring context parallelism); window is a sliding window (Mistral).
// A row that sees no key gets out = 0 and lse = -inf (a partial result that attention_merge ignores).
// out = softmax(scale * q k^T + mask) v per head; lse[b, h, i] = log sum_j exp(scale * q_i . k_j) over the
// visible j. f32 or bf16 tensors (one dtype for q, k, v, out, dout, dq, dk, dv); statistics and
// accumulation in f32.
// Backward: dq, dk, dv from q, k, v, the saved out and lse, and dout; overwritten, or accumulated (+=) with
// accumulate_grads (ring attention adds one step's partial gradients; the out and lse it passes are the
// merged, final ones). Deterministic: the same bits for any thread count.
struct AttentionParams {
  std::int64_t q_heads = 0;    // Hq
  std::int64_t kv_heads = 0;   // Hkv, divides Hq
  std::int64_t q_offset = 0;   // global position of query row 0
  std::int64_t k_offset = 0;   // global position of key row 0
  std::int64_t window = 0;     // sliding window (<= 0: none); causal only
  bool causal = true;          // false: every key is visible (window must be <= 0)
  float scale = 0.0f;          // softmax scale; 0 means 1 / sqrt(hd)
  bool accumulate_grads = false;  // backward only: dq, dk, dv += instead of =
  // f32 tensors that hold bf16 values, one block of a bf16 attention run in pieces (ring attention): the backend
  // rounds inside as its bf16 attention does, so the merged pieces are one bf16 call's result up to the order of
  // f32 sums, with f32 results (CPU: P and dS rounded to bf16 before the value products, docs/ops.md "Attention";
  // CUDA: its bf16 kernel rounds neither, so nothing changes). Ignored for bf16 tensors.
  bool bf16_roundings = false;
};
void attention_forward(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse, const AttentionParams& params);
void attention_backward(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const AttentionParams& params);
// Packed form (what a fused projection writes): qkv [B, T, (Hq + 2 Hkv) * hd] = q | k | v column blocks
// (Tq = Tk = T; GPT's [B, T, 3C] is Hq = Hkv); dqkv the same layout. Same math as the unpacked form.
void attention_forward_packed(const Context& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const AttentionParams& params);
void attention_backward_packed(const Context& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                               const Tensor& dout, const Tensor& dqkv, const AttentionParams& params);
// Merge of two partial results over disjoint key sets (ring attention): with lse = log(exp(lse_a) + exp(lse_b)),
// out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b, per row (a -inf side contributes nothing; both -inf
// gives out 0, lse -inf). out [B, T, H*hd] (f32 or bf16, one dtype), lse [B, H, T] f32. out and lse may alias
// out_a / lse_a (in-place accumulation); computed in f32.
void attention_merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                     const Tensor& lse_b, const Tensor& out, const Tensor& lse);

// ---- Llama pieces: RMSNorm, SwiGLU, rotary embeddings with grouped-query packing ------------------------
// RMSNorm over the last dimension (cols): rstd[r] = 1 / sqrt(mean over cols of x[r]^2 + eps) (f32 [rows]),
// y = x * rstd * weight. backward_input overwrites dx; backward_weight ACCUMULATES into dweight (f32):
// dweight += sum over rows of dy * x * rstd.
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps);
void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx);
void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight);
// The residual add fused into the norm (a pre-norm block's x1 = x + branch; norm(x1)), the same bits as the
// unfused pair add(x, y, r); rmsnorm_forward(r, weight, out, rstd) on every backend:
// add_rmsnorm_forward writes r = x + y (the new residual stream, in r's dtype; r may alias x or y) and out, rstd
// as rmsnorm_forward(r) does. add_rmsnorm_backward_input writes dr = rmsnorm_backward_input(dout, r, weight,
// rstd) + dresidual, the first term rounded to dr's dtype before the add as the pair's intermediate would be
// (dr may alias dresidual, not dout or r). The weight gradient is rmsnorm_backward_weight(dout, r, rstd, dweight).
void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& out, const Tensor& rstd, float eps);
void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr);
// SwiGLU gating: h = silu(gate) * up, silu(g) = g / (1 + exp(-g)); gate, up and h have one shape. backward
// overwrites dgate and dup (neither may alias gate, up or dh).
void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h);
void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup);
// Rotary position embedding and packing into attention_forward_packed's layout q | k | v.
// q [B, T, Hq*hd], k and v [B, T, Hkv*hd] (Hkv divides Hq, hd even) -> qkv [B, T, (Hq + 2P)*hd] with P key/value
// heads: grouped (repeat_kv_heads false, P = Hkv, the attention ops' GQA layout: key head j is rope(k head j),
// value head j is v head j) or repeated (true, P = Hq, for a core that takes Hq = Hkv: key head h is
// rope(k head h / g), value head h is v head h / g, g = Hq / Hkv). Query head h is rope(q head h).
// rope is Hugging Face's "rotate_half" layout (the layout LlamaForCausalLM's weights are stored for): for
// i < hd/2, with inv_freq_i = theta^(-2i/hd) and angle = (position_offset + t) * inv_freq_i (both f32, as
// transformers computes them), out[i] = x[i] cos - x[i + hd/2] sin, out[i + hd/2] = x[i + hd/2] cos + x[i] sin.
// backward overwrites dq, dk, dv from dqkv: rotations undone, each key/value head the sum over its P / Hkv packed
// copies (in head order; grouped: the one copy, bit for bit).
struct RopeParams {
  std::int64_t q_heads = 0;   // Hq (this tp rank's share)
  std::int64_t kv_heads = 0;  // Hkv (this tp rank's share); divides q_heads
  float theta = 10000.0f;
  std::int64_t position_offset = 0;  // position of token t = 0
  bool repeat_kv_heads = true;  // true: qkv holds Hq key/value heads (repeated); false: the Hkv heads once
  std::int64_t packed_kv_heads() const { return repeat_kv_heads ? q_heads : kv_heads; }
};
void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params);
void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params);

// ---- Embeddings ------------------------------------------------------------------------------------------
// A vocabulary range: `table` holds rows [first, first + valid) of a vocabulary of `vocab` ids as its rows
// [0, valid) (a tensor-parallel shard; padding rows beyond valid are never read). The whole table is
// {0, vocab, vocab}.
struct VocabRange {
  std::int64_t first = 0;
  std::int64_t valid = 0;
  std::int64_t vocab = 0;
};
// out[i, :] = table row of ids[i] when it lies in the range, else zeros; every id is checked against
// [0, vocab) (the message names the id, its position and the vocabulary). ids [B, T] i32, out [B, T, D].
void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range);
// dtable (f32) += dout rows of the ids in the range, in token order (deterministic).
void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range);
// x [B, T, D] += pos[t, :]; dpos (f32) [T', D] += sum over b of dx[b, t, :].
void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos);
void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos);

// ---- Softmax cross-entropy -------------------------------------------------------------------------------
// logits [rows, width] hold the classes of `range` in columns [0, range.valid) (width >= valid: vocabulary
// padding columns are ignored and get zero gradient); targets [rows] i32 are global class ids, -1 = ignored
// row; any other target outside [0, range.vocab) is an error naming the row. Statistics are f32 [rows].
//
// One shard (range = all classes): the fused forms. loss (f32, 1 element) = mean over the non-ignored rows
// (0 when none); lse[rows] is saved for backward; dlogits = dloss / valid_rows * (softmax - onehot), where
// dloss is a 1-element f32 tensor (the loss scale). dlogits may alias logits.
void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           const Tensor& loss);
void cross_entropy_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, const VocabRange& range);
// Vocab-parallel pieces (Megatron style), combined by the caller over its tp group:
//   row_max = all_reduce_max(shard_max)
//   [sum_exp; target_logit] = all_reduce_sum(shard_sum_exp_and_target)      (one [2, rows] tensor)
//   lse, loss = cross_entropy_loss(row_max, sums, targets)
// then cross_entropy_backward(..., range) on each shard.
void cross_entropy_shard_max(const Context& ctx, const Tensor& logits, const VocabRange& range,
                             const Tensor& row_max);
void cross_entropy_shard_sum_exp_and_target(const Context& ctx, const Tensor& logits, const Tensor& targets,
                                            const VocabRange& range, const Tensor& row_max, const Tensor& sums);
// lse = row_max + log(sum_exp); loss = mean over non-ignored rows of lse - target_logit (summed in row
// order in double, as the fused forward).
void cross_entropy_loss(const Context& ctx, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                        const Tensor& lse, const Tensor& loss);
// Accuracy pieces: neg_index[r] = -(global index of this shard's first column equal to row_max[r]), -inf if
// none; all_reduce_max over the group gives minus the row's first arg-max. count_correct: the number of
// non-ignored rows whose arg-max (-neg_index) equals the target, and the number of non-ignored rows.
void cross_entropy_shard_argmax(const Context& ctx, const Tensor& logits, const VocabRange& range,
                                const Tensor& row_max, const Tensor& neg_index);
struct CorrectCount {
  std::int64_t correct = 0;
  std::int64_t rows = 0;
};
CorrectCount count_correct(const Context& ctx, const Tensor& neg_index, const Tensor& targets);  // (host value)

// ---- Convolution and pooling (NCHW) ----------------------------------------------------------------------
// x [N, C, H, W], weight [C', C, k, k], bias [C'], y [N, C', H', W'] with H' = (H + 2p - k) / stride + 1.
// backward_input overwrites dx; backward_weight ACCUMULATES into dweight and dbias (f32).
struct Conv2dParams {
  std::int64_t stride = 1;
  std::int64_t padding = 0;
};
void conv2d_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Conv2dParams& params);
void conv2d_backward_input(const Context& ctx, const Tensor& dy, const Tensor& weight, const Tensor& dx,
                           const Conv2dParams& params);
void conv2d_backward_weight(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dweight,
                            const Tensor& dbias, const Conv2dParams& params);
// Max pooling, square window, no padding. argmax [N, C, H', W'] i32 (flat h*W + w in its plane, first of
// ties). backward overwrites dx [N, C, H, W].
void maxpool2d_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& argmax,
                       std::int64_t window, std::int64_t stride);
void maxpool2d_backward(const Context& ctx, const Tensor& dy, const Tensor& argmax, const Tensor& dx,
                        std::int64_t window, std::int64_t stride);

// ---- Optimizer updates (f32 master weights and state) ----------------------------------------------------
// torch.optim.AdamW / SGD semantics (kernels/cpu/adamw.hpp, sgd.hpp). step >= 1 counts updates including this
// one; sgd's momentum_buf may be undefined when momentum == 0. grad is f32 or bf16 (read widened).
struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  std::int64_t step = 1;
};
void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper);
struct SgdHyper {
  float lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;
};
void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& hyper);
// Many tensors' updates in one call (a rank's parameters each step: one OpenMP team on the CPU instead of one
// per tensor, issue 39). Each item takes its own weight decay (hyper.weight_decay is not read); the result is bit
// for bit adamw_update / sgd_update on each item in turn, whatever the thread count. The same checks per item.
struct AdamWItem {
  Tensor param, grad, m, v;
  float weight_decay = 0;
};
void adamw_update_many(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& hyper);
struct SgdItem {
  Tensor param, grad, momentum_buf;
  float weight_decay = 0;
};
void sgd_update_many(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& hyper);

// ---- The host-device boundary ----------------------------------------------------------------------------
// dst <- src: same dtype and numel; each of them on ctx.device or on the CPU (one side may be host memory
// while the op runs on a GPU). Enqueued on ctx.stream: a host side must stay alive and unmodified until the
// stream has passed the copy (synchronize). A host side from a pinned allocator makes the copy truly
// asynchronous; pageable memory is staged by the driver. On the CPU a memcpy that has finished on return.
void transfer(const Context& ctx, const Tensor& src, const Tensor& dst);
// The host waits until ctx.stream has finished everything enqueued on it (host value). A no-op on the CPU.
// Keep it out of steady-state step code except where a value is read back anyway (once per step).
void synchronize(const Context& ctx);
// A CPU tensor (cpu_allocator) holding a copy of `src`, read back through one host buffer; waits (host value).
Tensor to_host(const Context& ctx, const Tensor& src);
// A tensor on ctx.allocator holding a copy of the CPU tensor `src`; waits, so `src` may go at once. Set-up
// and checkpoint loading only: the step uploads batches from pinned memory with transfer.
Tensor to_device(const Context& ctx, const Tensor& src, MemoryCategory category);

// ---- The run's device --------------------------------------------------------------------------------------
// A run's stream on its device, owned by the run. The CPU's is cpu_stream(); cuda:N's is a non-blocking stream
// on N (never the legacy default stream).
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual const Stream& stream() const = 0;
};
// Makes `device` the calling thread's current device: cuda:N calls cudaSetDevice(N) (throws Error naming the
// visible count when N is not visible); the CPU has no current device, so nothing happens. A run calls it once,
// before it makes its stream (make_device_stream asserts that the device is current), from the thread that
// runs its work: launches, library handles and allocations made without a guard go to the current device.
void make_device_current(Device device);
// Devices of `type` this process can see: 1 for the CPU; cudaGetDeviceCount for cuda (0 in a build without
// CUDA, or when the driver reports none).
int visible_devices(DeviceType type);
// What `device` is, for logs and measured profiles: its name ("NVIDIA H100 80GB HBM3"; "cpu" for the CPU), a
// one-line description (compute capability, multiprocessors, memory, the CUDA library versions for cuda), and
// its memory in bytes (cuda: the device's; cpu: physical memory). Throws Error when the build cannot serve the
// device or it is not visible.
struct DeviceDescription {
  std::string name;
  std::string details;
  std::int64_t memory_bytes = 0;
};
DeviceDescription describe_device(Device device);
// The run's stream on `device`, which must be current (make_device_current; CLEAVE_ASSERT otherwise); throws
// Error when the build cannot serve it or the device is not visible.
std::unique_ptr<DeviceStream> make_device_stream(Device device);
// The run's allocator on `device` (its own cap and counters), its blocks reused in the order of `stream`
// (which must outlive it): a fresh CPU allocator, or cuda:N's caching allocator. Tensor::zero_ on its
// tensors is enqueued on `stream`.
std::unique_ptr<Allocator> make_device_allocator(Device device, const Stream& stream);
// Page-locked host memory (CPU tensors) for truly asynchronous transfers to and from `device` (a cuda device);
// its own cap and counters. Keep a pinned tensor alive and unmodified until the stream has passed its copy.
std::unique_ptr<Allocator> make_pinned_allocator(Device device);

// ---- Events: ordering between streams and timing on the device ---------------------------------------------
// A marker in a stream's work. record(s) marks the point stream s has reached (everything enqueued on it so
// far); wait(s) makes later work on stream s wait for the marked point without blocking the host (how a
// stream consumes what another produced); synchronize() blocks the host until the point is passed (a host wait,
// counted by no one: keep it out of steady-state step code); query() says whether it is (an event never
// recorded counts as passed). elapsed_ms_since(start): milliseconds from `start`'s point to this one's, on the
// device's clock, both recorded and passed (synchronize the later one first), both from one device.
// On the CPU, work has finished when it is enqueued: record notes the host's steady clock, wait and
// synchronize return at once, and elapsed_ms_since is the difference of the two clock readings (so a timeline
// built from events reads the same on both devices). cuda:N: a CUDA event (engine/cuda/stream.hpp).
// Use: the executor's measured timeline (train.trace) times actions on the run's stream with them; code that
// hands a tensor from one stream to another records on the producer and waits on the consumer.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void record(const Stream& stream) = 0;
  virtual void wait(const Stream& stream) const = 0;
  virtual void synchronize() const = 0;
  virtual bool query() const = 0;
  virtual double elapsed_ms_since(const DeviceEvent& start) const = 0;
};
// An event on `device`; throws Error when this build cannot serve it or the device is not visible.
std::unique_ptr<DeviceEvent> make_device_event(Device device);

// ---- Deferred device errors ------------------------------------------------------------------------------
// A GPU kernel cannot throw, so the user-data checks ops promise above (token ids in embedding_forward,
// targets in the cross-entropy ops) are recorded on the device and reported here: waits for ctx.stream (on a
// GPU always, also when no op has recorded anything yet: the trainer frees the step's pinned uploads after it)
// and throws the CPU kernel's message for the smallest bad position recorded since the last call (naming the
// id or target, its position and the vocabulary), then clears the record. (host value) Call it once where
// the caller synchronises anyway: the trainer calls it at the end of every step and evaluation pass. Results
// of the ops that recorded a bad index are meaningless until then (the bad rows read as zero / ignored).
// On the CPU the ops throw at once and this is a no-op.
void check_device_status(const Context& ctx);

// ---- Process-wide CPU runtime (the only knobs that are not per run) ----------------------------------------
// OpenMP/OpenBLAS threads for every CPU kernel (kernels/cpu/blas_runtime.hpp): set once at start-up, from
// the main thread. cpu_blas_description(): the loaded OpenBLAS and its core type, for logs (which library runs the
// GEMMs: cpu_gemm_description below).
void configure_cpu_threads(int threads);
int cpu_threads();  // OpenMP threads the CPU kernels use now
std::string cpu_blas_description();
// What the CPU backend's GEMMs run on for `requested` (device.blas) and operands of bf16 (true) or f32: the library
// and whether bf16 operands go to its bf16 kernels or are widened to f32 first (cpu_blas.hpp's rule on this
// process's facts: the libraries built, oneDNN's bf16 instructions). The memory plan reads it (the widened
// operands are workspace), resolved before the plan is made.
CpuGemmChoice resolved_cpu_gemm(CpuBlas requested, bool bf16_operands);
// Both operand dtypes at once (cpu_blas.hpp's choose_cpu_gemms on the same facts).
CpuGemmChoices resolved_cpu_gemms(CpuBlas requested);
// What the GEMMs of a run with device.blas `requested` run on, for `cleave version`, the run log and run.json:
// describe_cpu_gemms of resolved_cpu_gemms, then each library's version and what it picked on this CPU
// (kernels::cpu::gemm_backend_description), e.g. "f32 onednn, bf16 onednn on bf16 kernels (device.blas auto):
// oneDNN 2.6.3 (isa avx512_core_bf16)".
std::string cpu_gemm_description(CpuBlas requested);

}  // namespace cleave::ops
