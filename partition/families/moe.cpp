// The moe family's defaults, config checks, block list, tensor-parallel rules and table row (see moe.hpp).
//
// Invariants: as llama.cpp's (shapes chain, sizes > 0, one ConfigKeyError per bad key naming the numbers, all
// raised by make_moe_spec before anything is built or written; the only copy of the family's rules). The
// attention's rules are llama's (make_llama_spec checks them); the mixture's are here.
#include "partition/families/moe.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/families/family.hpp"
#include "partition/families/spec_util.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {

std::string enum_refusal(RouterKind, std::string_view text) {
  return fmt::format("\"{}\" is not a router kind; use \"softmax\" (softmax top-k, Mixtral / Qwen3-MoE) or "
                     "\"sigmoid\" (sigmoid scores with a balancing bias, DeepSeek-V3)",
                     text);
}

ForcedRouting forced_routing(const std::string& text, std::int64_t n_experts, std::int64_t top_k) {
  using Kind = ForcedRouting::Kind;
  ForcedRouting f;
  const std::string name = text.substr(0, text.find(':'));
  const std::string arg = text.find(':') == std::string::npos ? "" : text.substr(text.find(':') + 1);
  if (name.empty() && arg.empty()) return f;
  if (name == "uniform") f.kind = Kind::kUniform;
  else if (name == "zipf") f.kind = Kind::kZipf;
  else if (name == "one_expert") f.kind = Kind::kOneExpert;
  else if (name == "empty_rank") f.kind = Kind::kEmptyRank;
  else if (name == "moving_hot") f.kind = Kind::kMovingHot;
  else {
    throw ConfigKeyError("model.forced_routing",
                         fmt::format("\"{}\" is not a routing workload; use \"\" (the router chooses), \"uniform\", "
                                     "\"zipf\", \"one_expert\", \"empty_rank\", \"empty_rank:P\" or \"moving_hot\" "
                                     "(test and benchmark only: benchmarks/moe/)", text));
  }
  CLEAVE_CHECK_KEY(arg.empty() || f.kind == Kind::kEmptyRank, "model.forced_routing",
                   "\"{}\": only empty_rank takes a parameter (empty_rank:P)", text);
  if (!arg.empty()) {
    CLEAVE_CHECK_KEY(arg.find_first_not_of("0123456789") == std::string::npos && arg.size() < 6, "model.forced_routing",
                     "\"{}\": P of empty_rank:P must be a positive integer", text);
    f.parts = std::stoll(arg);
  }
  if (f.kind == Kind::kEmptyRank) {
    CLEAVE_CHECK_KEY(f.parts >= 2 && n_experts % f.parts == 0 && n_experts - n_experts / f.parts >= top_k,
                     "model.forced_routing", "\"{}\" leaves the last {} / {} experts empty: P must be >= 2 and divide "
                     "model.n_experts {}, and the other experts must be at least model.top_k {}", text, n_experts,
                     f.parts, n_experts, top_k);
  }
  return f;
}

MoeConfig moe_defaults(MoeConfig config) {
  static_cast<LlamaConfig&>(config) = llama_defaults(config);
  return config;
}

void check_bias_update_sharding(const MoeConfig& config, int zero_stage, std::int64_t dp, std::int64_t cp) {
  CLEAVE_CHECK_KEY(config.router != RouterKind::kSigmoid || config.bias_update_rate == 0.0 ||
                       zero_stage != 3 || dp * cp == 1,
                   "model.bias_update_rate",
                   "{} moves the sigmoid router's bias after every step on every rank that holds it, and "
                   "optimizer.zero_stage 3 over dp × cp = {} × {} ranks keeps only shards of it; set "
                   "model.bias_update_rate=0 (a fixed bias) or optimizer.zero_stage to 2 or less",
                   config.bias_update_rate, dp, cp);
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
  CLEAVE_CHECK_KEY(!given.shared_expert_gate || given.n_shared_experts > 0, "model.shared_expert_gate",
                   "is true but model.n_shared_experts is 0: the gate scales the shared experts' output; set "
                   "n_shared_experts > 0 or shared_expert_gate false");
  forced_routing(given.forced_routing, given.n_experts, given.top_k);
  CLEAVE_CHECK_KEY(given.aux_loss_coef >= 0.0, "model.aux_loss_coef", "must be >= 0, got {}", given.aux_loss_coef);
  CLEAVE_CHECK_KEY(given.z_loss_coef >= 0.0, "model.z_loss_coef", "must be >= 0, got {}", given.z_loss_coef);
  CLEAVE_CHECK_KEY(given.bias_update_rate >= 0.0, "model.bias_update_rate", "must be >= 0, got {}",
                   given.bias_update_rate);
  // The rate moves the sigmoid router's selection bias; the softmax router has none, so a rate set for it would be
  // accepted and do nothing. The default (written into every resolved config) and 0 (off) stay accepted.
  const double default_rate = MoeConfig{}.bias_update_rate;
  CLEAVE_CHECK_KEY(given.router == RouterKind::kSigmoid || given.bias_update_rate == 0.0 ||
                       given.bias_update_rate == default_rate,
                   "model.bias_update_rate",
                   "{} moves the sigmoid router's selection bias, and model.router is \"{}\" (no bias): set "
                   "model.router \"sigmoid\" or remove model.bias_update_rate",
                   given.bias_update_rate, given.router);
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
    b.shared_expert_gate = config.shared_expert_gate;
    b.router_bias = config.router == RouterKind::kSigmoid;
    b.aux_loss = config.aux_loss_coef > 0.0;
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

void moe_check_data_parallel(const FamilyConfigs& c, int zero_stage, std::int64_t dp, std::int64_t cp) {
  check_bias_update_sharding(c.moe, zero_stage, dp, cp);
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
  f.check_data_parallel = moe_check_data_parallel;
  f.blocks_are = spec_util::kLanguageModelBlocks;
  f.deeper_by = "model.n_layers";
  return f;
}

}  // namespace cleave::partition
