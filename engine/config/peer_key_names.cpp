// See peer_key_names.hpp.
#include "engine/config/peer_key_names.hpp"

#include <string_view>

namespace cleave::config {
namespace {

struct PeerName {
  std::string_view leaf;    // the other trainer's name
  std::string_view key;     // Cleave's key for it
  std::string_view other;   // or this one, when `known` lacks `key` (another model type's name); may be empty
};

// Megatron-LM (arguments.py), torchtitan (job_config.py) and transformers (PretrainedConfig subclasses) names.
constexpr std::string_view kTp = "parallel.tensor_model_parallel_size";
constexpr std::string_view kPp = "parallel.pipeline_model_parallel_size";
constexpr std::string_view kCp = "parallel.context_parallel_size";
constexpr std::string_view kEp = "parallel.expert_model_parallel_size";
constexpr std::string_view kDp = "parallel.data_parallel_size";
constexpr std::string_view kFfn = "model.ffn_hidden_size";
constexpr std::string_view kDff = "model.d_ff";

constexpr PeerName kPeerNames[] = {
    {"tensor_parallel_size", kTp, {}},
    {"tensor_parallel_degree", kTp, {}},
    {"tp", kTp, {}},
    {"pipeline_parallel_size", kPp, {}},
    {"pipeline_parallel_degree", kPp, {}},
    {"pp", kPp, {}},
    {"context_parallel_degree", kCp, {}},
    {"cp", kCp, {}},
    {"expert_parallel_size", kEp, {}},
    {"expert_parallel_degree", kEp, {}},
    {"ep", kEp, {}},
    {"data_parallel_degree", kDp, {}},
    {"data_parallel_replicate_degree", kDp, {}},
    {"data_parallel_shard_degree", kDp, {}},
    {"dp", kDp, {}},
    {"virtual_pipeline_model_parallel_size", "parallel.virtual_pipeline_stages", {}},
    {"hidden_size", "model.d_model", "model.hidden"},
    {"n_embd", "model.d_model", {}},
    {"num_layers", "model.n_layers", {}},
    {"num_hidden_layers", "model.n_layers", {}},
    {"num_attention_heads", "model.n_heads", {}},
    {"num_key_value_heads", "model.n_kv_heads", {}},
    {"num_query_groups", "model.n_kv_heads", {}},
    {"intermediate_size", kFfn, kDff},
    {"moe_intermediate_size", kFfn, {}},
    {"moe_ffn_hidden_size", kFfn, {}},
    {"n_inner", kDff, {}},
    {"max_position_embeddings", "model.seq_len", {}},
    {"seq_length", "model.seq_len", {}},
    {"num_local_experts", "model.n_experts", {}},
    {"num_moe_experts", "model.n_experts", {}},
    {"num_experts_per_tok", "model.top_k", {}},
    {"moe_router_topk", "model.top_k", {}},
    {"router_aux_loss_coef", "model.aux_loss_coef", {}},
    {"moe_aux_loss_coeff", "model.aux_loss_coef", {}},
    {"rms_norm_eps", "model.norm_eps", {}},
    {"tie_word_embeddings", "model.tie_embeddings", {}},
    {"learning_rate", "optimizer.lr", {}},
    {"clip_grad", "optimizer.grad_clip", {}},
    {"max_norm", "optimizer.grad_clip", {}},
    {"train_iters", "train.steps", {}},
};

std::string_view leaf_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

}  // namespace

std::optional<std::string> peer_key_name(const std::string& unknown, const std::set<std::string>& known) {
  const std::string_view leaf = leaf_of(unknown);
  for (const PeerName& peer : kPeerNames) {
    if (peer.leaf != leaf) continue;
    for (std::string_view key : {peer.key, peer.other}) {
      if (!key.empty() && known.count(std::string(key)) != 0) return std::string(key);
    }
  }
  return std::nullopt;
}

}  // namespace cleave::config
