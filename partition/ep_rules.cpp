// Expert-parallel size rules (see ep_rules.hpp).
#include "partition/ep_rules.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace cleave::partition {

std::int64_t routed_experts(const ModelSpec& spec) {
  for (const BlockSpec& b : spec.blocks) {
    if (b.n_experts > 0) return b.n_experts;
  }
  return 0;
}

std::vector<std::int64_t> allowed_ep_sizes(const ModelSpec& spec, std::int64_t dp_cp, std::int64_t limit) {
  const std::int64_t experts = routed_experts(spec);
  std::vector<std::int64_t> out{1};
  for (std::int64_t ep = 2; ep <= limit && experts > 0; ++ep) {
    if (experts % ep == 0 && (dp_cp <= 0 || dp_cp % ep == 0)) out.push_back(ep);
  }
  return out;
}

void check_expert_parallel(const ModelSpec& spec, int ep, int dp, int cp) {
  CLEAVE_CHECK_KEY(ep >= 1, kEpKey, "must be at least 1, got {}", ep);
  if (ep == 1) return;
  const std::int64_t experts = routed_experts(spec);
  CLEAVE_CHECK_KEY(experts > 0, kEpKey,
                   "{} splits the experts of a mixture-of-experts model, and this model has none (model.type \"moe\" "
                   "has experts); set it to 1",
                   ep);
  // The sizes offered must pass both rules below, so with dp known they divide dp × cp too.
  const std::int64_t dp_cp = dp > 0 ? static_cast<std::int64_t>(dp) * cp : 0;
  CLEAVE_CHECK_KEY(experts % ep == 0, kEpKey,
                   "{} does not divide model.n_experts {} (each ep rank holds n_experts / ep whole experts){}; use "
                   "expert_model_parallel_size in {{{}}}",
                   ep, experts, dp_cp > 0 ? fmt::format(" and must divide the dp × cp = {} ranks", dp_cp) : "",
                   fmt::join(allowed_ep_sizes(spec, dp_cp), ", "));
  if (dp <= 0) return;
  CLEAVE_CHECK_KEY(dp_cp % ep == 0, kEpKey,
                   "{} does not divide the dp × cp = {} × {} = {} ranks it is taken from (expert-parallel ranks are "
                   "data-parallel ranks that split the experts); use expert_model_parallel_size in {{{}}}, or launch "
                   "a world whose dp × cp is a multiple of {}",
                   ep, dp, cp, dp_cp, fmt::join(allowed_ep_sizes(spec, dp_cp), ", "), ep);
}

std::string ep_figure_at_ep_one(double value, std::string_view fix) {
  return fmt::format("{} sizes the routed rows expert parallelism sends a rank, and {} is 1 (every rank holds every "
                     "expert: no rank receives more than its own tokens' rows); set expert_model_parallel_size > 1, "
                     "or {}",
                     value, kEpKey, fix);
}

}  // namespace cleave::partition
