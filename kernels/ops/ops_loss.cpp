// Softmax cross-entropy, fused and vocab-parallel pieces: checks and dispatch (contracts in ops.hpp).
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

namespace {

void check_logits(const Context& ctx, std::string_view op, const Tensor& logits, const VocabRange& range) {
  check_float(ctx, op, "logits", logits);
  CLEAVE_CHECK(logits.rank() >= 1 && logits.shape().last() >= range.valid && logits.shape().last() > 0,
               "{}: logits {} are narrower than the {} classes of the shard", op, logits.shape().str(), range.valid);
  CLEAVE_CHECK(range.vocab > 0 && range.first >= 0 && range.valid >= 0 && range.first + range.valid <= range.vocab,
               "{}: class range [{}, {}) does not fit {} classes", op, range.first, range.first + range.valid,
               range.vocab);
}

void check_rows(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t, std::int64_t rows,
                DType dtype) {
  check_dtype(ctx, op, name, t, dtype);
  check_numel(op, name, t, rows);
}

}  // namespace

void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           const Tensor& loss) {
  constexpr std::string_view op = "cross_entropy_forward";
  const std::int64_t classes = logits.defined() ? logits.shape().last() : 0;
  check_logits(ctx, op, logits, {0, classes, classes});
  const std::int64_t rows = logits.shape().rows();
  check_rows(ctx, op, "targets", targets, rows, DType::kI32);
  check_rows(ctx, op, "lse", lse, rows, DType::kF32);
  check_rows(ctx, op, "loss", loss, 1, DType::kF32);
  slot_of(ctx, &Backend::cross_entropy_forward, op)(ctx, logits, targets, lse, loss);
}

void cross_entropy_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, const VocabRange& range) {
  constexpr std::string_view op = "cross_entropy_backward";
  check_logits(ctx, op, logits, range);
  const std::int64_t rows = logits.shape().rows();
  check_rows(ctx, op, "targets", targets, rows, DType::kI32);
  check_rows(ctx, op, "lse", lse, rows, DType::kF32);
  check_rows(ctx, op, "dloss", dloss, 1, DType::kF32);
  check_float(ctx, op, "dlogits", dlogits);
  check_same_numel(op, "dlogits", dlogits, "logits", logits);
  slot_of(ctx, &Backend::cross_entropy_backward, op)(ctx, logits, targets, lse, dloss, dlogits, range);
}

void cross_entropy_shard_max(const Context& ctx, const Tensor& logits, const VocabRange& range,
                             const Tensor& row_max) {
  constexpr std::string_view op = "cross_entropy_shard_max";
  check_logits(ctx, op, logits, range);
  check_rows(ctx, op, "row_max", row_max, logits.shape().rows(), DType::kF32);
  slot_of(ctx, &Backend::cross_entropy_shard_max, op)(ctx, logits, range, row_max);
}

void cross_entropy_shard_sum_exp_and_target(const Context& ctx, const Tensor& logits, const Tensor& targets,
                                            const VocabRange& range, const Tensor& row_max, const Tensor& sums) {
  constexpr std::string_view op = "cross_entropy_shard_sum_exp_and_target";
  check_logits(ctx, op, logits, range);
  const std::int64_t rows = logits.shape().rows();
  check_rows(ctx, op, "targets", targets, rows, DType::kI32);
  check_rows(ctx, op, "row_max", row_max, rows, DType::kF32);
  check_rows(ctx, op, "sums", sums, 2 * rows, DType::kF32);
  slot_of(ctx, &Backend::cross_entropy_shard_sum_exp_and_target, op)(ctx, logits, targets, range, row_max, sums);
}

void cross_entropy_loss(const Context& ctx, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                        const Tensor& lse, const Tensor& loss) {
  constexpr std::string_view op = "cross_entropy_loss";
  const std::int64_t rows = row_max.defined() ? row_max.numel() : 0;
  check_rows(ctx, op, "row_max", row_max, rows, DType::kF32);
  check_rows(ctx, op, "sums", sums, 2 * rows, DType::kF32);
  check_rows(ctx, op, "targets", targets, rows, DType::kI32);
  check_rows(ctx, op, "lse", lse, rows, DType::kF32);
  check_rows(ctx, op, "loss", loss, 1, DType::kF32);
  slot_of(ctx, &Backend::cross_entropy_loss, op)(ctx, row_max, sums, targets, lse, loss);
}

void cross_entropy_shard_argmax(const Context& ctx, const Tensor& logits, const VocabRange& range,
                                const Tensor& row_max, const Tensor& neg_index) {
  constexpr std::string_view op = "cross_entropy_shard_argmax";
  check_logits(ctx, op, logits, range);
  const std::int64_t rows = logits.shape().rows();
  check_rows(ctx, op, "row_max", row_max, rows, DType::kF32);
  check_rows(ctx, op, "neg_index", neg_index, rows, DType::kF32);
  slot_of(ctx, &Backend::cross_entropy_shard_argmax, op)(ctx, logits, range, row_max, neg_index);
}

CorrectCount count_correct(const Context& ctx, const Tensor& neg_index, const Tensor& targets) {
  constexpr std::string_view op = "count_correct";
  const std::int64_t rows = neg_index.defined() ? neg_index.numel() : 0;
  check_rows(ctx, op, "neg_index", neg_index, rows, DType::kF32);
  check_rows(ctx, op, "targets", targets, rows, DType::kI32);
  const auto slot = slot_of(ctx, &Backend::count_correct, op);
  note_host_wait(ctx, HostWait::kCountCorrect);
  return slot(ctx, neg_index, targets);
}

}  // namespace cleave::ops
