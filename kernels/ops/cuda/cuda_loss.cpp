// The CUDA backend's softmax cross-entropy slots (fused and vocab-parallel; contracts in ops.hpp) over
// kernels/cuda/cross_entropy. Logits and dlogits are read and written in their own dtype (f32 or bf16, f32
// arithmetic); statistics, loss and dloss are f32 device tensors, so nothing but count_correct waits. Bad
// targets are recorded in the device status (check_device_status throws the CPU kernel's message).
#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {
namespace {

kd::LogitsShard shard_of(const Tensor& logits, const VocabRange& range) {
  return {logits.shape().rows(), logits.shape().last(), range.valid, range.first, range.vocab};
}

std::uint64_t* targets_word(const Context& ctx, const VocabRange& range) {
  return device_status(ctx).targets_word(range.vocab, stream_of(ctx));
}

}  // namespace

void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           const Tensor& loss) {
  const std::int64_t classes = logits.shape().last();
  const VocabRange whole{0, classes, classes};
  const kd::LogitsShard shard = shard_of(logits, whole);
  const std::size_t bytes = kd::cross_entropy_forward_workspace_size(shard.rows);
  Tensor ws = scratch(ctx, bytes);
  kd::cross_entropy_forward(logits.raw_data(), float_type(logits), targets.data<std::int32_t>(), shard,
                            lse.data<float>(), loss.data<float>(), targets_word(ctx, whole), ws.raw_data(), bytes,
                            stream_of(ctx));
}

void cross_entropy_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, const VocabRange& range) {
  const std::size_t bytes = kd::cross_entropy_backward_workspace_size();
  Tensor ws = scratch(ctx, bytes);
  kd::cross_entropy_backward(logits.raw_data(), float_type(logits), targets.data<std::int32_t>(), lse.data<float>(),
                             dloss.data<float>(), dlogits.raw_data(), float_type(dlogits), shard_of(logits, range),
                             targets_word(ctx, range), ws.raw_data(), bytes, stream_of(ctx));
}

void cross_entropy_shard_max(const Context& ctx, const Tensor& logits, const VocabRange& range, const Tensor& row_max) {
  kd::cross_entropy_shard_max(logits.raw_data(), float_type(logits), shard_of(logits, range), row_max.data<float>(),
                              stream_of(ctx));
}

void cross_entropy_shard_sum_exp_and_target(const Context& ctx, const Tensor& logits, const Tensor& targets,
                                            const VocabRange& range, const Tensor& row_max, const Tensor& sums) {
  kd::cross_entropy_shard_sum_exp_and_target(logits.raw_data(), float_type(logits), targets.data<std::int32_t>(),
                                             shard_of(logits, range), row_max.data<float>(), sums.data<float>(),
                                             targets_word(ctx, range), stream_of(ctx));
}

void cross_entropy_loss(const Context& ctx, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                        const Tensor& lse, const Tensor& loss) {
  const std::int64_t rows = row_max.numel();
  const std::size_t bytes = kd::cross_entropy_loss_workspace_size(rows);
  Tensor ws = scratch(ctx, bytes);
  kd::cross_entropy_loss(row_max.data<float>(), sums.data<float>(), targets.data<std::int32_t>(), rows,
                         lse.data<float>(), loss.data<float>(), ws.raw_data(), bytes, stream_of(ctx));
}

void cross_entropy_shard_argmax(const Context& ctx, const Tensor& logits, const VocabRange& range,
                                const Tensor& row_max, const Tensor& neg_index) {
  kd::cross_entropy_shard_argmax(logits.raw_data(), float_type(logits), shard_of(logits, range),
                                 row_max.data<float>(), neg_index.data<float>(), stream_of(ctx));
}

CorrectCount count_correct(const Context& ctx, const Tensor& neg_index, const Tensor& targets) {
  Tensor counts = scratch(ctx, 2 * sizeof(std::int64_t));
  auto* device_counts = static_cast<std::int64_t*>(counts.raw_data());
  kd::count_correct(neg_index.data<float>(), targets.data<std::int32_t>(), neg_index.numel(), device_counts,
                    stream_of(ctx));
  std::int64_t host[2] = {0, 0};  // a host value by contract: one read-back
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(host, device_counts, sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return {host[0], host[1]};
}

}  // namespace cleave::ops::cuda_detail
