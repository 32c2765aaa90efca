// Per-rank boundary shapes of a tensor-parallel model (see tp_layout.hpp).
#include "layers/parallel/tp_layout.hpp"

namespace cleave::layers {
namespace {

using partition::check_tp_size;

// [T, V] logits -> [T, ceil(V / tp)].
Shape local_logits(const Shape& logits, int tp_size) {
  const std::int64_t vocab = logits.last();
  return logits.with_dim(logits.rank() - 1, (vocab + tp_size - 1) / tp_size);
}

}  // namespace

Shape tp_block_input(const partition::BlockSpec& block, int tp_size) {
  check_tp_size(tp_size);
  const bool vocab_logits = block.kind == partition::BlockKind::kSoftmaxCrossEntropy && block.vocab_size > 0;
  return tp_size > 1 && vocab_logits ? local_logits(block.input, tp_size) : block.input;
}

Shape tp_block_output(const partition::BlockSpec& block, int tp_size) {
  check_tp_size(tp_size);
  return tp_size > 1 && block.kind == partition::BlockKind::kLmHead ? local_logits(block.output, tp_size)
                                                                     : block.output;
}

}  // namespace cleave::layers
