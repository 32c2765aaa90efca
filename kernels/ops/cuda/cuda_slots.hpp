// Internal to the CUDA backend (kernels/ops/cuda): what its slot files share — the per-device resources, the
// stream and scratch of a Context, the f32 views of bf16 tensors — and the slots defined outside
// cuda_backend.cpp (one file per op family: cuda_loss.cpp, cuda_embedding.cpp, cuda_conv.cpp, cuda_llama.cpp,
// cuda_attention.cpp), which
// cuda_backend.cpp puts in the table.
//
// Invariants: every slot launches on ctx.stream and returns without waiting unless ops.hpp calls its op a
// host value; scratch comes from ctx.allocator (kWorkspace) and is released when the slot returns (the caching
// allocator is ordered on that stream, so the next op may reuse it at once).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/core/tensor.hpp"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/float_type.hpp"
#include "kernels/ops/backend.hpp"

namespace cleave::ops::cuda_detail {

namespace kd = kernels::cuda;

// Deferred user-data errors of one device (ops::check_device_status): two status words in device memory
// (kernels/cuda/index_status.hpp), one for token ids and one for targets, allocated on first use under a guard
// for the device, plus what the host needs to phrase the message (the last vocabulary each was checked
// against). Not thread-safe: one per run's resources.
class DeviceStatus {
 public:
  explicit DeviceStatus(int device) : device_(device) {}
  ~DeviceStatus();
  DeviceStatus(const DeviceStatus&) = delete;
  DeviceStatus& operator=(const DeviceStatus&) = delete;

  std::uint64_t* ids_word(std::int64_t vocab, cudaStream_t stream);
  std::uint64_t* targets_word(std::int64_t vocab, cudaStream_t stream);
  // Waits for `stream` (always: also before anything recorded into the words, since callers free the step's
  // pinned uploads after it) and reads both words (one 16-byte copy); when one is set, resets both and throws
  // the CPU kernel's message (ids first: the embedding runs before the loss).
  void check(cudaStream_t stream);

 private:
  std::uint64_t* words(cudaStream_t stream);
  int device_;
  std::uint64_t* words_ = nullptr;
  std::int64_t ids_vocab_ = 0;
  std::int64_t targets_vocab_ = 0;
};

// The CUDA resources of ctx (Context::resources), refused by name when the context has none.
kd::ConvContext& conv_context(const Context& ctx);
DeviceStatus& device_status(const Context& ctx);

cudaStream_t stream_of(const Context& ctx);
// Device scratch of at least `bytes` (8-byte words; at least one), category kWorkspace.
Tensor scratch(const Context& ctx, std::size_t bytes);
kd::FloatType float_type(const Tensor& t);  // f32 or bf16 (the seam checked it)

// An f32 device pointer for any f32/bf16 tensor: f32 in place; bf16 widened into scratch (F32In) and, for an
// output, narrowed back rounding to nearest even when the view ends (F32Out) — the CPU backend's
// cpu_f32_view.hpp on the GPU, for slots whose library (cuDNN) is used in f32 only.
class F32In {
 public:
  F32In(const Context& ctx, const Tensor& t);
  const float* get() const { return ptr_; }

 private:
  Tensor scratch_;
  const float* ptr_ = nullptr;
};
// A slot ends with finish() (the narrowing launch checked, so a failure throws); the destructor narrows only
// when finish() was not reached (an exception on the way) and can then only log a launch error: the launcher's
// cudaGetLastError has cleared it, so nothing later would report it.
class F32Out {
 public:
  F32Out(const Context& ctx, const Tensor& t, bool read);  // read: the slot reads the old values (+=)
  ~F32Out();
  void finish();
  F32Out(const F32Out&) = delete;
  F32Out& operator=(const F32Out&) = delete;
  float* get() const { return ptr_; }

 private:
  const Context& ctx_;
  Tensor target_;
  Tensor scratch_;
  float* ptr_ = nullptr;
};

// ---- Slots defined in the family files --------------------------------------------------------------------
double sum_squares_many(const Context& ctx, std::span<const Tensor> xs);  // cuda_backend.cpp
kernels::ExactSquareSum sum_squares_exact(const Context& ctx, std::span<const Tensor> xs);  // cuda_backend.cpp
void check_device_status(const Context& ctx);                              // cuda_backend.cpp

// cuda_loss.cpp
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

// cuda_embedding.cpp
void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range);
void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range);
void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos);
void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos);

// cuda_attention.cpp
void attention_forward(const Context& ctx, const AttentionProblem& problem);
void attention_backward(const Context& ctx, const AttentionProblem& problem);
void attention_merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                     const Tensor& lse_b, const Tensor& out, const Tensor& lse);

// cuda_llama.cpp
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps);
void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx);
void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight);
void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& normed, const Tensor& rstd, float eps);
void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr);
void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out);
void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out);
void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight);
void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h);
void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup);
void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params);
void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params);

// cuda_conv.cpp
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

}  // namespace cleave::ops::cuda_detail
