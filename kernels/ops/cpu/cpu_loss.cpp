// The CPU backend's softmax cross-entropy slots (contracts in ops.hpp; checks in ops_loss.cpp): the fused
// forward and backward, the vocab-parallel pieces (a shard's row max, its sum of exponentials and target logit,
// the loss from the reduced pieces, its arg-max) and the accuracy count. Invariant: the loss is the mean over rows
// with a target (targets < 0 are ignored; 0 when none), summed in row order in double as the fused forward does,
// so the vocab-parallel pieces give the fused loss's bits at tp 1.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

namespace {

// loss[0] = sum / valid rows (0 when none), as float.
void write_mean_loss(const Tensor& loss, double sum, const Tensor& targets) {
  const std::int64_t valid = kc::count_valid_targets(targets.data<std::int32_t>(), targets.numel());
  loss.data<float>()[0] = valid > 0 ? static_cast<float>(sum / static_cast<double>(valid)) : 0.0f;
}

}  // namespace

// The cross-entropy kernels read bf16 logits a row at a time (cross_entropy.hpp), with the bits of the widened
// tensor's; f32 logits are used in place.
void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           const Tensor& loss) {
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  const std::int32_t* t = targets.data<std::int32_t>();
  kc::KernelScratch* scratch = cpu_scratch(ctx);
  const double sum = logits.dtype() == DType::kBF16
                         ? kc::softmax_cross_entropy_forward(cpu_detail::bf16_data(logits), t, lse.data<float>(), rows,
                                                             classes, scratch)
                         : kc::softmax_cross_entropy_forward(logits.data<float>(), t, lse.data<float>(), rows, classes,
                                                             scratch);
  write_mean_loss(loss, sum, targets);
}

void cross_entropy_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, const VocabRange& range) {
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  const std::int32_t* t = targets.data<std::int32_t>();
  const std::int64_t valid_rows = kc::count_valid_targets(t, rows);
  const float scale = valid_rows > 0 ? dloss.data<float>()[0] / static_cast<float>(valid_rows) : 0.0f;
  if (logits.dtype() == DType::kBF16) {
    const auto* x = cpu_detail::bf16_data(logits);
    if (dlogits.dtype() == DType::kBF16) {
      kc::softmax_cross_entropy_backward_shard(x, t, range.first, lse.data<float>(), scale,
                                               cpu_detail::bf16_data(dlogits), rows, classes, range.vocab,
                                               range.valid, cpu_scratch(ctx));
    } else {
      kc::softmax_cross_entropy_backward_shard(x, t, range.first, lse.data<float>(), scale, dlogits.data<float>(),
                                               rows, classes, range.vocab, range.valid, cpu_scratch(ctx));
    }
    return;
  }
  F32Out out(ctx, dlogits, false);  // an f32 logits with a bf16 dlogits: narrowed whole
  kc::softmax_cross_entropy_backward_shard(logits.data<float>(), t, range.first, lse.data<float>(), scale, out.get(),
                                           rows, classes, range.vocab, range.valid, cpu_scratch(ctx));
}

void cross_entropy_shard_max(const Context& ctx, const Tensor& logits, const VocabRange& range,
                             const Tensor& row_max) {
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  if (logits.dtype() == DType::kBF16) {
    kc::cross_entropy_shard_max(cpu_detail::bf16_data(logits), row_max.data<float>(), rows, classes, range.valid,
                                cpu_scratch(ctx));
  } else {
    kc::cross_entropy_shard_max(logits.data<float>(), row_max.data<float>(), rows, classes, range.valid,
                                cpu_scratch(ctx));
  }
}

void cross_entropy_shard_sum_exp_and_target(const Context& ctx, const Tensor& logits, const Tensor& targets,
                                            const VocabRange& range, const Tensor& row_max, const Tensor& sums) {
  const std::int64_t rows = logits.shape().rows(), width = logits.shape().last();
  float* sum_exp = sums.data<float>();
  const std::int32_t* t = targets.data<std::int32_t>();
  if (logits.dtype() == DType::kBF16) {
    const auto* x = cpu_detail::bf16_data(logits);
    kc::cross_entropy_shard_sum_exp(x, row_max.data<float>(), sum_exp, rows, width, range.valid, cpu_scratch(ctx));
    kc::cross_entropy_shard_target_logit(x, t, range.first, sum_exp + rows, rows, width, range.vocab, range.valid);
    return;
  }
  const float* x = logits.data<float>();
  kc::cross_entropy_shard_sum_exp(x, row_max.data<float>(), sum_exp, rows, width, range.valid, cpu_scratch(ctx));
  kc::cross_entropy_shard_target_logit(x, t, range.first, sum_exp + rows, rows, width, range.vocab, range.valid);
}

void cross_entropy_loss(const Context& ctx, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                        const Tensor& lse, const Tensor& loss) {
  (void)ctx;
  const std::int64_t rows = row_max.numel();
  const float* mx = row_max.data<float>();
  const float* sum_exp = sums.data<float>();
  const float* target_logit = sum_exp + rows;
  const std::int32_t* t = targets.data<std::int32_t>();
  float* out = lse.data<float>();
  double total = 0.0;  // row order, as the fused forward
  for (std::int64_t r = 0; r < rows; ++r) {
    out[r] = mx[r] + std::log(sum_exp[r]);
    if (t[r] >= 0) total += static_cast<double>(out[r]) - static_cast<double>(target_logit[r]);
  }
  write_mean_loss(loss, total, targets);
}

void cross_entropy_shard_argmax(const Context& ctx, const Tensor& logits, const VocabRange& range,
                                const Tensor& row_max, const Tensor& neg_index) {
  (void)ctx;
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  if (logits.dtype() == DType::kBF16) {
    kc::cross_entropy_shard_argmax(cpu_detail::bf16_data(logits), row_max.data<float>(), range.first,
                                   neg_index.data<float>(), rows, classes, range.valid);
  } else {
    kc::cross_entropy_shard_argmax(logits.data<float>(), row_max.data<float>(), range.first, neg_index.data<float>(),
                                   rows, classes, range.valid);
  }
}

CorrectCount count_correct(const Context& ctx, const Tensor& neg_index, const Tensor& targets) {
  (void)ctx;
  CorrectCount count;
  const float* index = neg_index.data<float>();
  const std::int32_t* t = targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < targets.numel(); ++r) {
    if (t[r] < 0) continue;
    ++count.rows;
    if (-index[r] == static_cast<float>(t[r])) ++count.correct;
  }
  return count;
}

}  // namespace cleave::ops::cpu_detail
