// The names other trainers and Hugging Face's config.json give Cleave's config keys (Megatron-LM's arguments,
// torchtitan's job config, transformers' PretrainedConfig): a user coming from them writes `hidden_size` or
// `expert_parallel_degree`, which no edit distance leads to `d_model` or `expert_model_parallel_size` (the nearest
// key by spelling was another one: `parallel.expert_parallel_size` -> `context_parallel_size`).
//
// Invariant: a pure lookup by the key's leaf, whatever its section; it names only keys in `known` (the run's model
// type decides, e.g. `d_ff` for gpt and `ffn_hidden_size` for llama and moe), else nothing. Internal to engine/config.
#pragma once

#include <optional>
#include <set>
#include <string>

namespace cleave::config {

// The known key `unknown`'s leaf is another trainer's name for, when the table has it and `known` holds it.
std::optional<std::string> peer_key_name(const std::string& unknown, const std::set<std::string>& known);

}  // namespace cleave::config
