// The moe family's defaults, config checks, block list, tensor-parallel rules and table row (see moe.hpp).
//
// Invariants: as llama.cpp's (shapes chain, sizes > 0, one ConfigKeyError per bad key naming the numbers, all
// raised by make_moe_spec before anything is built or written; the only copy of the family's rules). The
// attention's rules are llama's (make_llama_spec checks them); the mixture's are here.
#include "partition/families/moe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "engine/core/error.hpp"
#include "partition/model_spec.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::partition {

RouterKind router_kind(const std::string& name) {
  if (name == "softmax") return RouterKind::kSoftmax;
  if (name == "sigmoid") return RouterKind::kSigmoid;
  throw ConfigKeyError("model.router",
                       fmt::format("\"{}\" is not a router kind; use \"softmax\" (softmax top-k, Mixtral / "
                                   "Qwen3-MoE) or \"sigmoid\" (sigmoid scores with a balancing bias, DeepSeek-V3)",
                                   name));
}

MoeConfig moe_defaults(MoeConfig config) {
  static_cast<LlamaConfig&>(config) = llama_defaults(config);
  return config;
}

ModelSpec make_moe_spec(const MoeConfig& given) {
  CLEAVE_CHECK_KEY(given.n_experts > 0, "model.n_experts", "must be > 0 (experts per moe block), got {}",
                   given.n_experts);
  CLEAVE_CHECK_KEY(given.top_k > 0, "model.top_k", "must be > 0 (experts per token), got {}", given.top_k);
  CLEAVE_CHECK_KEY(given.top_k <= given.n_experts, "model.top_k",
                   "{} is larger than model.n_experts {}: each token picks top_k distinct experts; use top_k <= {}",
                   given.top_k, given.n_experts, given.n_experts);
  CLEAVE_CHECK_KEY(given.n_shared_experts >= 0, "model.n_shared_experts", "must be >= 0, got {}",
                   given.n_shared_experts);
  router_kind(given.router);
  CLEAVE_CHECK_KEY(given.aux_loss_coef >= 0.0, "model.aux_loss_coef", "must be >= 0, got {}", given.aux_loss_coef);
  CLEAVE_CHECK_KEY(given.z_loss_coef >= 0.0, "model.z_loss_coef", "must be >= 0, got {}", given.z_loss_coef);
  CLEAVE_CHECK_KEY(given.bias_update_rate >= 0.0, "model.bias_update_rate", "must be >= 0, got {}",
                   given.bias_update_rate);
  const MoeConfig config = moe_defaults(given);
  ModelSpec spec = make_llama_spec(config);  // the attention's and the sizes' checks, llama's block order
  spec.type = ModelType::kMoe;
  spec.moe = config;
  for (BlockSpec& b : spec.blocks) {
    if (b.kind != BlockKind::kLlamaBlock) continue;
    b.kind = BlockKind::kMoeBlock;
    b.n_experts = config.n_experts;
    b.top_k = config.top_k;
    b.n_shared_experts = config.n_shared_experts;
    b.router_bias = router_kind(config.router) == RouterKind::kSigmoid;
  }
  return spec;
}

namespace {

ModelSpec moe_spec(const FamilyConfigs& c) { return make_moe_spec(c.moe); }

void moe_resolve(FamilyConfigs& c) { c.moe = moe_defaults(c.moe); }

TokenSizes moe_token_sizes(const FamilyConfigs& c) {
  const MoeConfig& l = c.moe;
  return {l.vocab_size, l.d_model, l.n_layers, l.n_heads, l.seq_len, l.ffn_hidden_size, l.tie_embeddings};
}

constexpr const char* kTpKey = "parallel.tensor_model_parallel_size";

// Every tp rank holds whole query and key/value heads and an equal share of every expert's SwiGLU width
// (Megatron's expert tensor parallelism: each expert's gate and up split by columns, down by rows); the router
// and the expert count are not split.
void moe_check_tensor_parallel(const FamilyConfigs& c, int tp_size) {
  const MoeConfig& m = c.moe;
  const std::int64_t g = std::gcd(std::gcd(m.n_heads, m.n_kv_heads), m.ffn_hidden_size);
  const std::string allowed = fmt::format("{{{}}}", fmt::join(allowed_tp_sizes(g, g), ", "));
  const auto rule = [&](std::int64_t value, const char* key, const char* what) {
    CLEAVE_CHECK_KEY(value % tp_size == 0, key,
                     "{} is not divisible by {} {}: each tp rank needs {}; use tp in {} (divisors of n_heads, "
                     "n_kv_heads and ffn_hidden_size)",
                     value, kTpKey, tp_size, what, allowed);
  };
  rule(m.n_heads, "model.n_heads", "whole query heads");
  rule(m.n_kv_heads, "model.n_kv_heads", "whole key/value heads");
  rule(m.ffn_hidden_size, "model.ffn_hidden_size", "an equal share of every expert's SwiGLU columns");
}

std::vector<std::int64_t> moe_tp_sizes(const FamilyConfigs& c) {
  const MoeConfig& l = c.moe;
  return allowed_tp_sizes(std::gcd(l.n_heads, l.n_kv_heads), l.ffn_hidden_size);
}

}  // namespace

Family moe_family() {
  Family f;
  f.type = ModelType::kMoe;
  f.name = "moe";
  f.language_model = true;
  f.make_spec = moe_spec;
  f.resolve = moe_resolve;
  f.token_sizes = moe_token_sizes;
  f.check_tensor_parallel = moe_check_tensor_parallel;
  f.tp_sizes = moe_tp_sizes;
  f.sequence_parallel = true;
  return f;
}

}  // namespace cleave::partition
