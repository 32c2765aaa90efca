// See routing_imbalance_measure.hpp.
#include "engine/planner/routing_imbalance_measure.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <string_view>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "partition/ep_rules.hpp"

namespace cleave::planner {
namespace {

// "moe_ep_rows_b<i>_s<s>_d<d>" -> (i, d); nullopt for any other name.
std::optional<std::pair<int, int>> block_and_destination(std::string_view key) {
  constexpr std::string_view prefix = "moe_ep_rows_b";
  if (!key.starts_with(prefix)) return std::nullopt;
  key.remove_prefix(prefix.size());
  int numbers[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), numbers[i]);
    if (ec != std::errc{}) return std::nullopt;
    key.remove_prefix(static_cast<std::size_t>(end - key.data()));
    if (i == 2) break;
    const std::string_view next = i == 0 ? "_s" : "_d";
    if (!key.starts_with(next)) return std::nullopt;
    key.remove_prefix(next.size());
  }
  if (!key.empty()) return std::nullopt;
  return std::pair{numbers[0], numbers[2]};
}

}  // namespace

std::optional<config::RunConfig> routing_run_config(const config::RunConfig& config, int ranks, int steps,
                                                    std::string& why) {
  const std::int64_t experts = partition::routed_experts(run_plan::model_spec(config.model));
  if (experts <= 0) {
    why = fmt::format("model.type {} has no routed experts", config.model.type);
    return std::nullopt;
  }
  if (ranks < 2) {
    why = "one rank: expert parallelism needs 2 or more (run cleave profile under mpiexec)";
    return std::nullopt;
  }
  if (experts % ranks != 0) {
    why = fmt::format("model.n_experts {} does not split over the profile's {} ranks (ep = ranks)", experts, ranks);
    return std::nullopt;
  }
  config::RunConfig c = config;
  c.parallel = config::ParallelConfig{};
  c.parallel.data_parallel_size = ranks;
  c.parallel.expert_model_parallel_size = ranks;
  c.parallel.comm_backend = config.parallel.comm_backend;
  c.parallel.p2p_progress = config.parallel.p2p_progress;
  const std::int64_t micro = config.batch.micro_batch_size.value_or(8);
  c.batch.micro_batch_size = micro;
  c.batch.global_batch_size =
      config.batch.global_batch_size.value_or(micro * config.batch.gradient_accumulation_steps.value_or(1) * ranks);
  c.batch.gradient_accumulation_steps.reset();
  c.optimizer.zero_stage = 0;
  c.optimizer.zero_reduce = config::ZeroReduce::kAuto;
  c.train.steps = steps;
  c.train.trace = false;
  c.train.report = false;
  c.train.eval_interval = 0;
  c.train.eval_batches = 0;
  c.train.recompute = partition::Recompute::kNone;
  c.checkpoint = config::CheckpointConfig{};
  c.checkpoint.save_final = false;
  c.device.memory_limit = 0;
  try {
    c.resolve(ranks);
  } catch (const Error& e) {
    why = fmt::format("the config at ep = dp = {} ranks does not resolve: {}", ranks, e.what());
    return std::nullopt;
  }
  return c;
}

std::optional<double> step_busiest_over_mean(std::span<const std::pair<std::string, double>> fields) {
  std::map<int, std::map<int, double>> rows;  // block -> destination -> rows
  for (const auto& [key, value] : fields) {
    if (const auto at = block_and_destination(key)) rows[at->first][at->second] += value;
  }
  if (rows.empty()) return std::nullopt;
  double excess = 0;
  for (const auto& [block, per_rank] : rows) {
    double sum = 0, most = 0;
    for (const auto& [rank, r] : per_rank) {
      sum += r;
      most = std::max(most, r);
    }
    if (sum <= 0) return std::nullopt;
    excess += most / (sum / static_cast<double>(per_rank.size())) - 1.0;
  }
  return 1.0 + excess / static_cast<double>(rows.size());
}

partition::MeasuredRoutingImbalance routing_record(const std::vector<double>& per_step, int ep, std::int64_t micro_batch,
                                                   std::string source) {
  CLEAVE_CHECK(!per_step.empty(), "routing imbalance: no step measured");
  partition::MeasuredRoutingImbalance m;
  m.per_step = per_step;
  m.steps = static_cast<int>(per_step.size());
  m.busiest_over_mean = std::accumulate(per_step.begin(), per_step.end(), 0.0) / static_cast<double>(per_step.size());
  m.ep = ep;
  m.micro_batch = micro_batch;
  m.source = std::move(source);
  return m;
}

}  // namespace cleave::planner
