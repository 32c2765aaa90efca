// A compute backend: one function-pointer slot per op of the seam (ops.hpp), registered explicitly.
//
// Invariants:
//  - Slots are called only after the public op in ops.hpp has checked every argument (devices, dtypes,
//    shapes), so a slot converts and launches, nothing more. Sizes a slot needs come resolved (GemmProblem).
//  - A null slot means "this backend has no kernel for the op": the public op throws
//    "<op> is not implemented on <device>", never falls back to another device.
//  - Registration is explicit (backend_for's switch, `#if CLEAVE_WITH_CUDA`), never static
//    self-registration, which linkers silently drop from static libraries.
//
// Adding a backend: a Backend table with its slots (kernels/ops/<name>/), an Allocator and a Stream type for
// its device, a case in backend_for, and make_device_resources for its per-device handles.
#pragma once

#include <cstdint>
#include <memory>

#include "cleave/config.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::ops {

// A checked GEMM with its sizes resolved: batch entries of A start stride_a elements apart (0 = broadcast);
// leading dimensions are the stored row strides (contiguous tensors: lda = columns of A as stored).
struct GemmProblem {
  Tensor a, b, c, bias;
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0, batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  // m or k is a grouped GEMM's group row count (GroupedGemmProblem), which changes from call to call: a backend
  // may run such problems on one plan made for any m and k (the CPU's oneDNN: one primitive, not one per count).
  bool varying_shape = false;
};

// A checked grouped GEMM (ops.hpp "Mixture of experts"), one GEMM per non-empty group: group g covers rows
// [first_g, first_g + rows[g]) of the row-block operands, first_g the sum of the rows before it;
// detail::group_gemm resolves group g's GemmProblem (varying_shape set), so no backend builds a list of them.
//   kRowBlocks:  C_g = alpha · A_g · op(B[g]) + beta · C_g; A [rows, k], C [rows, n], B [G, k, n]
//                (trans_b: [G, n, k]).
//   kWeightGrad: C[g] = alpha · A_g^T · B_g + beta · C[g]; A [rows, m], B [rows, n], C [G, m, n].
enum class GroupedGemmKind { kRowBlocks, kWeightGrad };
struct GroupedGemmProblem {
  GroupedGemmKind kind = GroupedGemmKind::kRowBlocks;
  Tensor a, b, c;                      // A and the row-block operands as 2-D [rows, cols] views
  std::span<const std::int64_t> rows;  // per group (G of them): >= 0, summing to A's rows
  GemmOptions options;                 // each group's GEMM options (trans_a set for kWeightGrad)
};

// A checked attention call with its layout resolved (ops.hpp "Attention"): each operand is a tensor, the column
// of its head 0 and its row stride in elements. The packed form points q, k and v (and dq, dk, dv) at one
// tensor with three column offsets; the unpacked form has col 0 and ld = heads * head_dim. The backward-only
// operands (dout, dq, dk, dv) are undefined in a forward problem. params.scale is resolved (never 0).
struct AttentionOperand {
  Tensor t;
  std::int64_t col = 0;
  std::int64_t ld = 0;
};
struct AttentionProblem {
  AttentionOperand q, k, v, out;
  AttentionOperand dout, dq, dk, dv;
  Tensor lse;  // [B, Hq, Tq] f32
  std::int64_t batch = 0, q_len = 0, kv_len = 0, head_dim = 0;
  AttentionParams params;
};

struct Backend {
  const char* name;
  void (*gemm)(const Context&, const GemmProblem&);
  // A grouped GEMM's groups (independent GEMMs: no two write the same C element; ops_moe.cpp): the gemm slot's
  // result on each group's problem (detail::group_gemm), except that a backend may run each whole on one thread
  // where the gemm slot would slice it (outside deterministic mode a GEMM's bits may depend on its slices; a group's
  // bits still depend on its own shape and the thread count only). A backend without a kernel of its own fills
  // this with detail::grouped_gemm_each. Host memory: none per call (a steady-state step allocates nothing).
  void (*grouped_gemm)(const Context&, const GroupedGemmProblem&);
  void (*fill)(const Context&, const Tensor&, float);
  void (*copy)(const Context&, const Tensor& src, const Tensor& dst);
  void (*copy_2d)(const Context&, const Tensor& src, const Tensor& dst, const Copy2d& shape);
  void (*copy_3d)(const Context&, const Tensor& src, const Tensor& dst, const Copy3d& shape);
  void (*add)(const Context&, const Tensor& a, const Tensor& b, const Tensor& out);
  void (*add_inplace)(const Context&, const Tensor& y, const Tensor& x);
  void (*scale_inplace)(const Context&, const Tensor& y, float alpha);
  // A backend without a multi-tensor kernel fills this with detail::scale_inplace_each.
  void (*scale_inplace_many)(const Context&, std::span<const Tensor> ys, float alpha);
  void (*axpy)(const Context&, float alpha, const Tensor& x, const Tensor& y);
  double (*sum_squares)(const Context&, const Tensor& x);
  double (*sum_squares_many)(const Context&, std::span<const Tensor> xs);
  kernels::ExactSquareSum (*sum_squares_exact)(const Context&, std::span<const Tensor> xs);
  void (*bias_add_forward)(const Context&, const Tensor& y, const Tensor& bias);
  void (*bias_backward)(const Context&, const Tensor& dy, const Tensor& dbias);
  void (*gelu_forward)(const Context&, const Tensor& x, const Tensor& y);
  void (*gelu_backward)(const Context&, const Tensor& x, const Tensor& dy, const Tensor& dx);
  void (*relu_forward)(const Context&, const Tensor& x, const Tensor& y);
  void (*relu_backward)(const Context&, const Tensor& x, const Tensor& dy, const Tensor& dx);
  void (*softmax_forward)(const Context&, const Tensor& x, const Tensor& y);
  void (*softmax_backward)(const Context&, const Tensor& y, const Tensor& dy, const Tensor& dx);
  void (*layernorm_forward)(const Context&, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, float eps);
  void (*layernorm_backward_input)(const Context&, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& dx);
  void (*layernorm_backward_weight)(const Context&, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta);
  void (*attention_forward)(const Context&, const AttentionProblem& problem);
  void (*attention_backward)(const Context&, const AttentionProblem& problem);
  void (*attention_merge)(const Context&, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                          const Tensor& lse_b, const Tensor& out, const Tensor& lse);
  void (*rmsnorm_forward)(const Context&, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                          float eps);
  void (*rmsnorm_backward_input)(const Context&, const Tensor& dy, const Tensor& x, const Tensor& weight,
                                 const Tensor& rstd, const Tensor& dx);
  void (*rmsnorm_backward_weight)(const Context&, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                  const Tensor& dweight);
  void (*add_rmsnorm_forward)(const Context&, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                              const Tensor& out, const Tensor& rstd, float eps);
  void (*add_rmsnorm_backward_input)(const Context&, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                     const Tensor& weight, const Tensor& rstd, const Tensor& dr);
  void (*swiglu_forward)(const Context&, const Tensor& gate, const Tensor& up, const Tensor& h);
  void (*swiglu_backward)(const Context&, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                          const Tensor& dup);
  void (*rope_pack_qkv)(const Context&, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                        const RopeParams& params);
  void (*rope_pack_qkv_backward)(const Context&, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                                 const Tensor& dv, const RopeParams& params);
  void (*embedding_forward)(const Context&, const Tensor& ids, const Tensor& table, const Tensor& out,
                            const VocabRange& range);
  void (*embedding_backward)(const Context&, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                             const VocabRange& range);
  void (*moe_gather)(const Context&, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out);
  void (*moe_combine)(const Context&, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out);
  void (*moe_combine_weight_grad)(const Context&, const Tensor& dy, const Tensor& src, const Tensor& rows,
                                  const Tensor& dweight);
  void (*position_embedding_forward)(const Context&, const Tensor& x, const Tensor& pos);
  void (*position_embedding_backward)(const Context&, const Tensor& dx, const Tensor& dpos);
  void (*cross_entropy_forward)(const Context&, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& loss);
  void (*cross_entropy_backward)(const Context&, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                 const Tensor& dloss, const Tensor& dlogits, const VocabRange& range);
  void (*cross_entropy_shard_max)(const Context&, const Tensor& logits, const VocabRange& range,
                                  const Tensor& row_max);
  void (*cross_entropy_shard_sum_exp_and_target)(const Context&, const Tensor& logits, const Tensor& targets,
                                                 const VocabRange& range, const Tensor& row_max, const Tensor& sums);
  void (*cross_entropy_loss)(const Context&, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                             const Tensor& lse, const Tensor& loss);
  void (*cross_entropy_shard_argmax)(const Context&, const Tensor& logits, const VocabRange& range,
                                     const Tensor& row_max, const Tensor& neg_index);
  CorrectCount (*count_correct)(const Context&, const Tensor& neg_index, const Tensor& targets);
  void (*conv2d_forward)(const Context&, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                         const Conv2dParams& params);
  void (*conv2d_backward_input)(const Context&, const Tensor& dy, const Tensor& weight, const Tensor& dx,
                                const Conv2dParams& params);
  void (*conv2d_backward_weight)(const Context&, const Tensor& x, const Tensor& dy, const Tensor& dweight,
                                 const Tensor& dbias, const Conv2dParams& params);
  void (*maxpool2d_forward)(const Context&, const Tensor& x, const Tensor& y, const Tensor& argmax,
                            std::int64_t window, std::int64_t stride);
  void (*maxpool2d_backward)(const Context&, const Tensor& dy, const Tensor& argmax, const Tensor& dx,
                             std::int64_t window, std::int64_t stride);
  void (*adamw_update)(const Context&, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWHyper& hyper);
  void (*sgd_update)(const Context&, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                     const SgdHyper& hyper);
  // A backend without a multi-tensor kernel fills these with detail::adamw_update_each / sgd_update_each
  // (ops_optim.cpp: its single-tensor slot per item).
  void (*adamw_update_many)(const Context&, std::span<const AdamWItem> items, const AdamWHyper& hyper);
  void (*sgd_update_many)(const Context&, std::span<const SgdItem> items, const SgdHyper& hyper);
  void (*check_device_status)(const Context&);
  void (*transfer)(const Context&, const Tensor& src, const Tensor& dst);
  void (*synchronize)(const Context&);
};

namespace detail {
// The multi-tensor slots of a backend without multi-tensor kernels: the context's backend's single-tensor slot on
// each item in turn (ops_optim.cpp, ops_elementwise.cpp), which is the multi-tensor ops' contract by definition.
void adamw_update_each(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& hyper);
void sgd_update_each(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& hyper);
void scale_inplace_each(const Context& ctx, std::span<const Tensor> ys, float alpha);
// Group g's GEMM (rows [first, first + problem.rows[g]) of the row-block operands; ops_moe.cpp), and the gemm slot
// on each non-empty group in turn.
GemmProblem group_gemm(const Context& ctx, const GroupedGemmProblem& problem, std::int64_t g, std::int64_t first);
void grouped_gemm_each(const Context& ctx, const GroupedGemmProblem& problem);
}  // namespace detail

// The backend serving `device` in this build; throws Error when the build has none (a cuda device in a
// build without CUDA names the reason).
const Backend& backend_for(Device device);
// The table an op of `ctx` calls: ctx.backend when a test substituted one, else backend_for(ctx.device).
const Backend& backend_of(const Context& ctx);

// The backends, for tests that list their slots.
const Backend& cpu_backend();
std::unique_ptr<DeviceResources> make_cpu_resources();  // kernels/ops/cpu/cpu_resources.cpp
#if CLEAVE_WITH_CUDA
const Backend& cuda_backend();
std::unique_ptr<DeviceResources> make_cuda_resources(Device device);  // kernels/ops/cuda/cuda_backend.cpp
// kernels/ops/cuda/cuda_runtime.cpp: the CUDA halves of visible_devices, make_device_current, describe_device,
// make_device_stream, make_device_allocator and make_device_event (ops.hpp).
int cuda_visible_devices();
void make_cuda_device_current(Device device);
DeviceDescription describe_cuda_device(Device device);
std::unique_ptr<DeviceStream> make_cuda_stream(Device device);
std::unique_ptr<Allocator> make_cuda_allocator(Device device, const Stream& stream);
std::unique_ptr<Allocator> make_cuda_pinned_allocator();
std::unique_ptr<DeviceEvent> make_cuda_event(Device device);
#endif

}  // namespace cleave::ops
