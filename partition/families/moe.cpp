// The moe family's defaults, config checks, block list, tensor-parallel rules and table row (see moe.hpp).
//
// Invariants: as llama.cpp's (shapes chain, sizes > 0, one ConfigKeyError per bad key naming the numbers, all
// raised by make_moe_spec before anything is built or written; the only copy of the family's rules). The
// attention's rules are llama's (make_llama_spec checks them); the mixture's are here.
#include "partition/families/moe.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/families/family.hpp"
#include "partition/model_spec.hpp"

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

TokenSizes moe_token_sizes(const FamilyConfigs& c) { return llama_token_sizes(c.moe); }

// Llama's rules (whole heads per rank), with each expert's SwiGLU split as Megatron's expert tensor parallelism
// (gate and up by columns, down by rows); the router and the expert count are not split.
void moe_check_tensor_parallel(const FamilyConfigs& c, int tp_size) {
  check_llama_tensor_parallel(c.moe, tp_size, "an equal share of every expert's SwiGLU columns");
}

std::vector<std::int64_t> moe_tp_sizes(const FamilyConfigs& c) { return llama_tp_sizes(c.moe); }

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
