// Tensor-parallel size rules (see tp_rules.hpp).
#include "partition/tp_rules.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

constexpr const char* kTpKey = "parallel.tensor_model_parallel_size";

std::string allowed_list(std::int64_t n_heads, std::int64_t d_ff) {
  return fmt::format("{{{}}}", fmt::join(allowed_tp_sizes(n_heads, d_ff), ", "));
}

}  // namespace

void check_tp_size(int tp_size) { CLEAVE_CHECK_KEY(tp_size >= 1, kTpKey, "must be >= 1, got {}", tp_size); }

std::vector<std::int64_t> allowed_tp_sizes(std::int64_t n_heads, std::int64_t d_ff) {
  const std::int64_t g = std::gcd(std::max<std::int64_t>(n_heads, 0), std::max<std::int64_t>(d_ff, 0));
  std::vector<std::int64_t> out;
  for (std::int64_t t = 1; t <= g; ++t) {
    if (g % t == 0) out.push_back(t);
  }
  return out;
}

void check_tp_heads(std::int64_t n_heads, int tp_size, std::int64_t d_ff) {
  check_tp_size(tp_size);
  CLEAVE_CHECK_KEY(tp_size <= n_heads, kTpKey,
                   "{} is larger than model.n_heads {}: each tp rank needs at least one attention head; use tp in {}",
                   tp_size, n_heads, allowed_list(n_heads, d_ff));
  CLEAVE_CHECK_KEY(n_heads % tp_size == 0, "model.n_heads",
                   "{} is not divisible by {} {}: each tp rank needs whole attention heads; use tp in {}", n_heads,
                   kTpKey, tp_size, allowed_list(n_heads, d_ff));
}

void check_tp_d_ff(std::int64_t d_ff, int tp_size, std::int64_t n_heads) {
  check_tp_size(tp_size);
  CLEAVE_CHECK_KEY(d_ff % tp_size == 0, "model.d_ff",
                   "{} is not divisible by {} {}: each tp rank holds d_ff / tp MLP columns; use tp in {}", d_ff, kTpKey,
                   tp_size, allowed_list(n_heads, d_ff));
}

namespace {
bool can_split(const Family& f) { return f.check_tensor_parallel != nullptr; }
}  // namespace

void check_tensor_parallel(const ModelSpec& spec, int tp_size) {
  check_tp_size(tp_size);
  if (tp_size == 1) return;
  const Family& f = family(spec.type);
  CLEAVE_CHECK_KEY(can_split(f), kTpKey,
                   "{} needs a {} model: tensor parallelism supports model.type {} only (got model.type {}); use 1",
                   tp_size, family_names(can_split, "or"), family_names(can_split, "and"), spec.type);
  f.check_tensor_parallel(spec, tp_size);
}

void check_sequence_parallel(const ModelSpec& spec, int tp_size, bool on) {
  if (!on) return;
  CLEAVE_CHECK_KEY(tp_size > 1, "parallel.sequence_parallel",
                   "needs {} > 1 (it splits along the sequence what the tp group replicates), got {}; set it to "
                   "false or raise tp",
                   kTpKey, tp_size);
  const auto sequence_parallel = [](const Family& f) { return f.sequence_parallel; };
  CLEAVE_CHECK_KEY(family(spec.type).sequence_parallel, "parallel.sequence_parallel",
                   "needs a {} model (got model.type {}); set it to false", family_names(sequence_parallel, "or"),
                   spec.type);
  const std::int64_t seq_len = spec.token_sizes().seq_len;
  CLEAVE_CHECK_KEY(seq_len % tp_size == 0, "model.seq_len",
                   "{} is not divisible by {} {}: parallel.sequence_parallel gives each tp rank seq_len / tp tokens "
                   "of every sample; use a seq_len that is a multiple of {} or set parallel.sequence_parallel to false",
                   seq_len, kTpKey, tp_size, tp_size);
}

namespace {

// The residual stream between tp regions: [T, D] -> [T / tp, D] under sequence parallelism (the families'
// repeated layers, BlockRules::sequence_sharded, and the final LayerNorm or RmsNorm).
bool sequence_sharded_block(const BlockSpec& block) {
  const BlockRules* rules = family_block_rules(block.kind);
  if (rules != nullptr) return rules->sequence_sharded;
  return block.kind == BlockKind::kLayerNorm || block.kind == BlockKind::kRmsNorm;
}
bool sequence_sharded_input(const BlockSpec& block) {
  return sequence_sharded_block(block) || block.kind == BlockKind::kLmHead;
}
bool sequence_sharded_output(const BlockSpec& block) {
  return sequence_sharded_block(block) || block.kind == BlockKind::kEmbedding;
}
Shape sequence_shard(const Shape& stream, int tp_size) { return stream.with_dim(0, stream[0] / tp_size); }

// [T, V] logits -> [T, ceil(V / tp)].
Shape local_logits(const Shape& logits, int tp_size) {
  const std::int64_t vocab = logits.last();
  return logits.with_dim(logits.rank() - 1, (vocab + tp_size - 1) / tp_size);
}

}  // namespace

Shape tp_block_input(const BlockSpec& block, int tp_size, bool sequence_parallel) {
  check_tp_size(tp_size);
  if (tp_size > 1 && sequence_parallel && sequence_sharded_input(block)) return sequence_shard(block.input, tp_size);
  const bool vocab_logits = block.kind == BlockKind::kSoftmaxCrossEntropy && block.vocab_size > 0;
  return tp_size > 1 && vocab_logits ? local_logits(block.input, tp_size) : block.input;
}

Shape tp_block_output(const BlockSpec& block, int tp_size, bool sequence_parallel) {
  check_tp_size(tp_size);
  if (tp_size > 1 && sequence_parallel && sequence_sharded_output(block)) {
    return sequence_shard(block.output, tp_size);
  }
  return tp_size > 1 && block.kind == BlockKind::kLmHead ? local_logits(block.output, tp_size) : block.output;
}

}  // namespace cleave::partition
