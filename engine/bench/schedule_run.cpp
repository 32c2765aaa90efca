// See schedule_run.hpp.
#include "engine/bench/schedule_run.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <span>

#include "engine/comm/link_probe.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/collectives.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/trainer.hpp"
#include "partition/cost_model.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::bench {
namespace {

// Mean measured duration of each compute kind per stage, as simulator costs; REDUCE_GRAD per stage and the
// optimizer step (mean over ranks) too, since the measured timeline counts them as work. A fused B is split
// evenly into I and W, which keeps their sum (all the simulator uses for B) exact.
pipeline::SimulationCosts measured_costs(const pipeline::Timeline& timeline, int num_stages) {
  struct Mean {
    double sum = 0;
    int n = 0;
    double value() const { return n ? sum / n : 0.0; }
  };
  std::vector<Mean> f(num_stages), in(num_stages), w(num_stages), b(num_stages), reduce(num_stages);
  Mean optimizer;
  for (const auto& rank : timeline.ranks) {
    for (const auto& t : rank) {
      const double d = t.end - t.start;
      if (t.action.kind == pipeline::ActionKind::kOptimizerStep) {
        optimizer.sum += d, ++optimizer.n;
        continue;
      }
      const auto s = static_cast<std::size_t>(t.action.stage);
      switch (t.action.kind) {
        case pipeline::ActionKind::kReduceGrad: reduce[s].sum += d, ++reduce[s].n; break;
        case pipeline::ActionKind::kForward: f[s].sum += d, ++f[s].n; break;
        case pipeline::ActionKind::kBackwardInput: in[s].sum += d, ++in[s].n; break;
        case pipeline::ActionKind::kBackwardWeight: w[s].sum += d, ++w[s].n; break;
        case pipeline::ActionKind::kBackward: b[s].sum += d, ++b[s].n; break;
        default: break;
      }
    }
  }
  pipeline::SimulationCosts costs = pipeline::SimulationCosts::uniform(num_stages);
  for (std::size_t s = 0; s < static_cast<std::size_t>(num_stages); ++s) {
    auto& c = costs.stages[s];
    c.forward = f[s].value();
    c.backward_input = b[s].n ? b[s].value() / 2 : in[s].value();
    c.backward_weight = b[s].n ? b[s].value() / 2 : w[s].value();
    c.reduce_grad = reduce[s].value();
  }
  costs.optimizer_step = optimizer.value();
  return costs;
}

// Each work action of `lowered` at the duration it took in `measured` (same rank, same action); -1 where the
// measured step has no such action (the simulator then uses the mean).
std::vector<std::vector<double>> measured_durations(const pipeline::Schedule& lowered, const pipeline::Timeline& measured) {
  std::vector<std::vector<double>> out(lowered.ranks.size());
  for (std::size_t r = 0; r < lowered.ranks.size(); ++r) {
    std::map<pipeline::Action, double> took;
    if (r < measured.ranks.size()) {
      for (const auto& t : measured.ranks[r]) {
        if (!pipeline::is_communication(t.action.kind)) took[t.action] = t.end - t.start;
      }
    }
    for (const auto& a : lowered.ranks[r]) {
      const auto it = took.find(a);
      out[r].push_back(!pipeline::is_communication(a.kind) && it != took.end() ? it->second : -1.0);
    }
  }
  return out;
}

std::vector<std::int64_t> gather_per_rank(comm::Communicator& world, std::int64_t mine) {
  const auto all = train::all_gather_values<std::int64_t>(world, std::span(&mine, 1));
  std::vector<std::int64_t> out;
  for (const auto& v : all) out.push_back(v.at(0));
  return out;
}

// The caller's overrides, then evaluation off (its interval too, which would say it has no effect): what
// bench_config and every schedule's run read.
std::vector<std::string> evaluation_off(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = overrides;
  all.push_back("train.eval_batches=0");
  all.push_back("train.eval_interval=0");
  return all;
}

// The overrides run_schedule trains with: the caller's, evaluation off, then the schedule, trace on.
std::vector<std::string> schedule_overrides(const std::vector<std::string>& overrides, const ScheduleChoice& choice,
                                            int total_steps) {
  std::vector<std::string> all = evaluation_off(overrides);
  all.push_back("parallel.schedule=" + choice.name);
  all.push_back("parallel.virtual_pipeline_stages=" + std::to_string(choice.virtual_stages));
  if (choice.name != "auto") {  // the config's settings for the automatic scheduler apply to `auto` only
    all.push_back("parallel.auto_schedule_memory_limit=0");
    all.push_back("parallel.auto_schedule_profile=\"\"");
    all.push_back("parallel.auto_schedule_weight_stash_fraction=1");
    all.push_back("parallel.auto_schedule_objective=\"makespan\"");
  }
  all.push_back("train.trace=true");
  all.push_back("train.steps=" + std::to_string(total_steps));
  return all;
}

}  // namespace

config::RunConfig bench_config(const std::string& config_path, const std::vector<std::string>& overrides) {
  return config::load_config(config_path, evaluation_off(overrides));
}

std::string ScheduleChoice::label() const {
  return virtual_stages > 1 ? fmt::format("{}:{}", name, virtual_stages) : name;
}

std::vector<ScheduleChoice> parse_schedule_list(const std::string& text) {
  std::vector<ScheduleChoice> out;
  std::string known;
  for (auto n : pipeline::schedule_names()) known += fmt::format("{}{}", known.empty() ? "" : ", ", n);
  if (text == "all") {
    for (auto n : pipeline::schedule_names()) out.push_back({std::string(n), 1});
    return out;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = text.find(',', start);
    const std::string entry = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const auto colon = entry.find(':');
    ScheduleChoice choice{entry.substr(0, colon), 1};
    CLEAVE_CHECK_INPUT(pipeline::is_schedule_name(choice.name),
                 "bench: --schedules entry '{}' is not a schedule; known: {} (or 'all'; name:V sets virtual stages)",
                 entry, known);
    if (colon != std::string::npos) {
      const std::string v = entry.substr(colon + 1);
      CLEAVE_CHECK_INPUT(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 4 &&
                       std::stoi(v) >= 1,
                   "bench: --schedules entry '{}': virtual stages after ':' must be a whole number >= 1", entry);
      choice.virtual_stages = std::stoi(v);
    }
    for (const ScheduleChoice& earlier : out) {
      CLEAVE_CHECK_INPUT(earlier.name != choice.name || earlier.virtual_stages != choice.virtual_stages,
                         "bench: --schedules lists '{}' twice; each schedule runs once (drop the repeat)", entry);
    }
    out.push_back(choice);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string schedule_problem(const std::string& config_path, const std::vector<std::string>& overrides,
                             const ScheduleChoice& choice, int world_size) {
  try {
    config::RunConfig config = config::load_config(config_path, schedule_overrides(overrides, choice, 1));
    config.resolve(world_size);
    (void)run_plan::make_plan(config, static_cast<int>(config.resolved_batch().gradient_accumulation_steps), 0);
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

ScheduleRun run_schedule(const std::string& config_path, const std::vector<std::string>& overrides,
                         const ScheduleChoice& choice, int steps, int warmup, comm::Communicator& world) {
  const std::vector<std::string> all = schedule_overrides(overrides, choice, steps + warmup);
  std::unique_ptr<train::Trainer> made;
  try {  // a config error is the same on every rank, so every rank throws it
    made = std::make_unique<train::Trainer>(config::load_config(config_path, all), world);
  } catch (const Error& e) {
    CLEAVE_THROW("bench: schedule {} cannot run this config: {}", choice.label(), e.what());
  }
  train::Trainer& trainer = *made;
  ScheduleRun run;
  run.choice = choice;
  std::int64_t p2p = 0;
  double items = 0;  // global items (tokens or samples) per step
  std::vector<pipeline::Timeline> timelines;  // of every measured step (gathered between steps, untimed)
  for (int s = 0; s < steps + warmup; ++s) {
    if (s == warmup) trainer.reset_peak_memory();
    const auto stats = trainer.step(s);
    if (s == 0) run.first_loss = stats.loss;
    p2p = stats.p2p_bytes;
    items = stats.tokens_per_s * stats.step_ms * 1e-3;
    if (s >= warmup) {
      run.step_ms.push_back(stats.step_ms);
      timelines.push_back(trainer.measured_timeline());
    }
  }
  const MemoryStats memory = trainer.memory_stats();
  run.peak_bytes = gather_per_rank(world, memory.peak_total);
  run.peak_activations = gather_per_rank(world, memory.peak_of(MemoryCategory::kActivations));
  run.p2p_bytes = gather_per_rank(world, p2p);
  const auto& plan = trainer.plan();
  run.schedule = plan.schedule;
  run.stages = plan.num_stages();
  run.pp_size = plan.schedule.pp_size;
  run.microbatches = plan.schedule.num_microbatches;
  // The median step (by wall time) is the one reported and drawn: one slow step must not be the picture.
  std::vector<std::size_t> order(run.step_ms.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return run.step_ms[a] < run.step_ms[b]; });
  const std::size_t median = order[order.size() / 2];
  run.median_step_ms = run.step_ms[median];
  run.measured = std::move(timelines[median]);
  run.tokens_per_s = items / (run.median_step_ms * 1e-3);
  run.measured_stats = pipeline::timeline_stats(run.measured);
  run.costs = measured_costs(run.measured, run.stages);
  if (plan.schedule.pp_size > 1) {
    // P2P: each stage's boundary tensor per micro-batch, over a latency + bytes / bandwidth fit of ping-pongs
    // between world ranks (0,1), (2,3), ... timed now at 4 KiB and the largest boundary size.
    const auto& config = trainer.config();
    const DType act = config.device.precision == config::Precision::kBf16 ? DType::kBF16 : DType::kF32;
    const auto costs = partition::model_costs(plan.spec, act);
    const std::int64_t micro = config.resolved_batch().micro_batch_size;
    std::int64_t largest = 4096;
    for (int st = 0; st < run.stages; ++st) {
      const auto& range = plan.partition.stages[static_cast<std::size_t>(st)];
      const std::int64_t bytes = costs[static_cast<std::size_t>(range.end - 1)].output_bytes * micro;
      run.costs.stages[static_cast<std::size_t>(st)].output_bytes = static_cast<double>(bytes);
      largest = std::max(largest, (bytes + 3) / 4 * 4);
    }
    run.p2p_fit = partition::fit_alpha_beta(comm::time_ping_pong(world, {4096, std::max<std::int64_t>(largest, 8192)}, 10), 2);
    run.costs.p2p_latency = run.p2p_fit.latency_s * 1e3;            // the timelines are in ms
    run.costs.p2p_bandwidth = run.p2p_fit.bandwidth_Bps * 1e-3;     // bytes per ms
  }
  run.predicted = pipeline::simulate(plan.schedule, run.costs);
  pipeline::SimulationCosts replay = run.costs;
  replay.action_durations = measured_durations(run.predicted.lowered, run.measured);
  run.replayed = pipeline::simulate(plan.schedule, replay);
  return run;
}

}  // namespace cleave::bench
