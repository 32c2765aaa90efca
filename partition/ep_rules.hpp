// Expert-parallel size rules (parallel.expert_model_parallel_size): pure rules over the model spec and the
// layout's sizes, no layers, no devices, written once for the config check, the resolve against a world size,
// the plan and the planner. Errors are ConfigKeyError naming the key at fault, the numbers and sizes that work:
//   parallel.expert_model_parallel_size: 3 does not divide model.n_experts 4 (each ep rank holds
//   n_experts / ep whole experts); use expert_model_parallel_size in {1, 2, 4}
//
// Rules: ep = 1 needs nothing. ep > 1 needs
//  - a mixture-of-experts model (a block with n_experts > 0: model.type "moe");
//  - ep dividing n_experts (rank q holds experts [q·E/ep, (q+1)·E/ep));
//  - ep dividing dp × cp, the ranks it is taken from (Megatron's folding: within the dp × cp group ep is the
//    fastest coordinate), once dp is known (a world size, or parallel.data_parallel_size set).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "partition/model_spec.hpp"

namespace cleave::partition {

inline constexpr const char* kEpKey = "parallel.expert_model_parallel_size";

// The routed experts per MoE block of the model (0: a dense model).
std::int64_t routed_experts(const ModelSpec& spec);

// Every ep size from 1 to `limit` that divides the model's experts (and dp × cp when dp_cp > 0), ascending.
std::vector<std::int64_t> allowed_ep_sizes(const ModelSpec& spec, std::int64_t dp_cp = 0, std::int64_t limit = 64);

// Throws ConfigKeyError unless ep_size keeps the rules above; dp_size <= 0: dp not known yet (that rule skipped).
void check_expert_parallel(const ModelSpec& spec, int ep_size, int dp_size = 0, int cp_size = 1);

// The refusal of an ep imbalance figure (`value`: parallel.ep_stash_imbalance, ep_peak_imbalance, or a command's
// --ep-*imbalance flag) at ep 1, where every rank holds every expert and nothing reads it, then the way out `fix`
// ("remove the key (or 0)", "drop --ep-imbalance"): one wording for the config's keys and the commands' flags.
std::string ep_figure_at_ep_one(double value, std::string_view fix);

}  // namespace cleave::partition
