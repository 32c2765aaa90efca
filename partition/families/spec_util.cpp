// Helpers of the families' spec builders (see spec_util.hpp).
#include "partition/families/spec_util.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::partition::spec_util {

void check_positive(std::int64_t value, std::string_view key) {
  CLEAVE_CHECK_KEY(value > 0, fmt::format("model.{}", key), "must be > 0, got {}", value);
}

BlockSpec make_block(BlockKind kind, std::string name, const Shape& input, const Shape& output,
                     std::int64_t in_features, std::int64_t out_features) {
  BlockSpec block;
  block.kind = kind;
  block.name = std::move(name);
  block.input = input;
  block.output = output;
  block.in_features = in_features;
  block.out_features = out_features;
  return block;
}

BlockSpec make_loss_block(const Shape& logits, std::int64_t classes) {
  return make_block(BlockKind::kSoftmaxCrossEntropy, "loss", logits, Shape{}, classes);
}

}  // namespace cleave::partition::spec_util
