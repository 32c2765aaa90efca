// Plan construction: schedule first (it fixes the stage → rank placement and how many micro-batches each
// rank keeps in flight), then the stage partition balanced by the cost model under that in-flight count.
#include "engine/run_plan/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/family.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/schedule_text.hpp"
#include "partition/hardware_profile.hpp"
#include "partition/measured_costs.hpp"
#include "partition/cp_rules.hpp"
#include "partition/tp_rules.hpp"
#include "pipeline/schedules/auto_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/timeline.hpp"
#include "pipeline/validator.hpp"

namespace cleave::run_plan {
namespace {

// `auto`: the automatic zero-bubble scheduler with equal stages (the partition balances them) whose F, I and W
// are the model's totals / pp: measured (parallel.auto_schedule_profile, a `cleave profile` file: block times
// at this tp width and micro-batch, a recomputed block's rerun share of its forward added to I, and the
// P2P fit for the boundary tensor), else the cost model's FLOP ratio. Memory limit:
// parallel.auto_schedule_memory_limit stashes per rank (0 = pp, 1F1B's memory), a stash weighing
// parallel.auto_schedule_weight_stash_fraction of itself between its I and W; the search minimises
// parallel.auto_schedule_objective first (makespan or span). The options here (with their
// checks), the search in compute_and_lowered.
pipeline::AutoScheduleOptions auto_schedule_options(const config::RunConfig& config) {
  const int pp = config.parallel.pipeline_model_parallel_size;
  const int v = effective_virtual_stages(config);
  CLEAVE_CHECK(v == 1,
               "schedule auto runs one stage per rank (the automatic scheduler places one stage on each rank), got "
               "parallel.virtual_pipeline_stages {}",
               v);
  pipeline::AutoScheduleOptions options;
  options.memory_limit = config.parallel.auto_schedule_memory_limit;
  options.weight_stash_fraction = config.parallel.auto_schedule_weight_stash_fraction;
  options.objective = config.parallel.auto_schedule_objective == config::AutoScheduleObjectiveChoice::kSpan
                          ? pipeline::AutoScheduleObjective::kSpan
                          : pipeline::AutoScheduleObjective::kMakespan;
  if (const std::string& path = config.parallel.auto_schedule_profile; !path.empty()) {
    const partition::ModelSpec spec = model_spec(config.model);
    const partition::MeasuredCosts measured = partition::load_profile(path).measured;
    CLEAVE_CHECK(measured.has_blocks(),
                 "parallel.auto_schedule_profile: profile {} has no measured costs (a shipped hardware profile, or no "
                 "block table); write one with `cleave profile CONFIG`",
                 path);
    const int tp = config.parallel.tensor_model_parallel_size;
    const std::int64_t micro = config.resolved_batch().micro_batch_size;
    const DType timed_in = config.device.precision == config::Precision::kBf16 ? DType::kBF16 : DType::kF32;
    partition::check_measured_covers(measured, spec, timed_in, tp, path);
    const auto plain = partition::model_costs(spec);
    const auto costs = partition::model_costs(spec, DType::kF32, config.train.recompute);
    double f = 0, i = 0, w = 0;
    for (std::size_t b = 0; b < spec.blocks.size(); ++b) {
      const partition::BlockTimes t = measured.block_times(spec.blocks[b], tp, micro, path);
      const double rerun = plain[b].forward_flops > 0
                               ? (costs[b].input_grad_flops - plain[b].input_grad_flops) / plain[b].forward_flops
                               : 0.0;
      f += t.forward_s, i += t.input_grad_s + rerun * t.forward_s, w += t.weight_grad_s;
    }
    options.costs = pipeline::SimulationCosts::uniform(pp, f / pp, i / pp, w / pp);
    if (measured.p2p) {
      options.costs.p2p_latency = measured.p2p->latency_s;
      options.costs.p2p_bandwidth = measured.p2p->bandwidth_Bps;
      // Boundaries are whole on every tp rank, except under sequence parallelism: one tp rank's shards.
      const bool sp = config.parallel.sequence_parallel && tp > 1;
      const auto sent = sp ? partition::model_costs(spec, DType::kF32, partition::Recompute::kNone, tp, true) : plain;
      for (int s = 0; s < pp; ++s) {  // the boundary after stage s of an even split
        const std::size_t last = static_cast<std::size_t>((s + 1) * static_cast<int>(spec.blocks.size()) / pp - 1);
        options.costs.stages[static_cast<std::size_t>(s)].output_bytes =
            static_cast<double>(sent[last].output_bytes * micro);
      }
    }
    return options;
  }
  double forward = 0, input = 0, weight = 0;
  for (const auto& block : partition::model_costs(model_spec(config.model))) {
    forward += block.forward_flops;
    input += block.input_grad_flops;
    weight += block.weight_grad_flops;
  }
  if (forward > 0 && input > 0 && weight > 0) {
    options.costs = pipeline::SimulationCosts::uniform(pp, 1.0, input / forward, weight / forward);
  } else {
    options.costs = pipeline::SimulationCosts::uniform(pp);
  }
  return options;
}

pipeline::Schedule make_compute_schedule(const config::RunConfig& config, int num_microbatches) {
  const int pp = config.parallel.pipeline_model_parallel_size;
  const std::string& name = config.parallel.schedule;
  if (name == "auto") return pipeline::auto_schedule(pp, num_microbatches, auto_schedule_options(config)).schedule;
  if (pipeline::is_schedule_name(name)) {
    config::check_schedule_microbatches(config, num_microbatches);
    return pipeline::make_schedule(name, pp, num_microbatches, effective_virtual_stages(config));
  }
  pipeline::Schedule schedule = pipeline::load_schedule(name);
  CLEAVE_CHECK(schedule.pp_size == pp,
               "parallel.schedule file '{}' is written for {} pp ranks but parallel.pipeline_model_parallel_size "
               "is {}",
               name, schedule.pp_size, pp);
  CLEAVE_CHECK(schedule.num_microbatches == num_microbatches,
               "parallel.schedule file '{}' runs {} micro-batches but the batch config gives {} per step "
               "(batch.gradient_accumulation_steps)",
               name, schedule.num_microbatches, num_microbatches);
  return schedule;
}

// The cache key of `auto` with these options: every field the search reads, doubles exact (fmt's shortest
// round-trip form), so two keys are equal only when the searches are.
std::string auto_schedule_key(int pp, int num_microbatches, const pipeline::AutoScheduleOptions& o) {
  std::string key = fmt::format("auto pp{} m{} limit{} fraction{} evaluations{} objective{} p2p{},{}", pp,
                                num_microbatches, o.memory_limit, o.weight_stash_fraction, o.max_evaluations,
                                static_cast<int>(o.objective), o.costs.p2p_latency, o.costs.p2p_bandwidth);
  for (const pipeline::StageCost& s : o.costs.stages) {
    key += fmt::format(" {},{},{},{}", s.forward, s.backward_input, s.backward_weight, s.output_bytes);
  }
  return key;
}

// The key a stage count past the model's blocks is refused on: parallel.virtual_pipeline_stages when the config sets
// it above 1, else parallel.pipeline_model_parallel_size (v is then the schedule's default).
std::string stage_count_key(const config::RunConfig& config) {
  return config.parallel.virtual_pipeline_stages > 1 ? "parallel.virtual_pipeline_stages"
                                                     : "parallel.pipeline_model_parallel_size";
}

// A ConfigKeyError on `key`, so a command says where the key came from ("config FILE: key: ..." or "--set k=v: ...").
// The model's blocks and the key that adds more are the family's words (Family::blocks_are, deeper_by).
void check_stage_count(std::int64_t num_stages, int pp, int v, std::size_t num_blocks, const std::string& key,
                       partition::ModelType type) {
  // Each stage runs at least one block. The message names the keys: parallel.virtual_pipeline_stages 1 means the
  // schedule's default, 2 for the two-chunk schedules, so "virtual stages 2" alone did not say where the 2 came from.
  const partition::Family& family = partition::family(type);
  CLEAVE_CHECK_KEY(static_cast<std::size_t>(num_stages) <= num_blocks, key,
               "{} pipeline stages (pipeline_model_parallel_size {} x virtual stages {}) but the model "
               "has only {} blocks ({} model's: {}) and each stage needs at least one; use "
               "pipeline_model_parallel_size x virtual stages <= {} (parallel.virtual_pipeline_stages, whose 1 means "
               "the schedule's default: 2 for interleaved_1f1b, zb_v and dualpipev) or a model {} deeper ({})",
               num_stages, pp, v, num_blocks, with_article(family.name), family.blocks_are, num_blocks,
               count_of(num_stages - static_cast<std::int64_t>(num_blocks), "block"), family.deeper_by);
}

// The compute schedule (validated) and its lowered form. A named schedule or `auto` is checked as its builder
// would check it, then refused when it has more stages than the model has blocks, before it is built (the same
// error make_plan gives after building it: an `auto` search on a pp of thousands of ranks would run for hours
// only to be refused); then taken from `cache` when one is given and holds it (ScheduleCache's invariant).
std::shared_ptr<const ScheduleCache::Entry> compute_and_lowered(const config::RunConfig& config, int num_microbatches,
                                                                std::size_t num_blocks, ScheduleCache* cache) {
  const std::string& name = config.parallel.schedule;
  const int pp = config.parallel.pipeline_model_parallel_size;
  std::string key;
  std::optional<pipeline::AutoScheduleOptions> auto_options;
  if (name == "auto" || pipeline::is_schedule_name(name)) {
    const int v = effective_virtual_stages(config);
    if (name == "auto") {
      auto_options = auto_schedule_options(config);
      pipeline::check_auto_schedule(pp, num_microbatches, *auto_options);
    } else {
      config::check_schedule_microbatches(config, num_microbatches);
      pipeline::check_schedule_args(name, pp, num_microbatches, v);
    }
    check_stage_count(static_cast<std::int64_t>(pp) * v, pp, v, num_blocks, stage_count_key(config),
                      config.model.type);
    if (cache != nullptr) {
      key = auto_options ? auto_schedule_key(pp, num_microbatches, *auto_options)
                         : fmt::format("{} pp{} m{} v{}", name, pp, num_microbatches, v);
      if (auto hit = cache->find(key)) return hit;
    }
  }
  ScheduleCache::Entry built;
  built.compute = auto_options ? pipeline::auto_schedule(pp, num_microbatches, *auto_options).schedule
                               : make_compute_schedule(config, num_microbatches);
  pipeline::check_schedule(built.compute);
  built.lowered = pipeline::ensure_lowered(built.compute);
  auto entry = std::make_shared<const ScheduleCache::Entry>(std::move(built));
  if (cache != nullptr && !key.empty()) cache->insert(key, entry);
  return entry;
}

}  // namespace

partition::ModelSpec model_spec(const config::ModelConfig& model) { return partition::make_model_spec(model.type, model); }

int effective_virtual_stages(const config::RunConfig& config) {
  const int v = config.parallel.virtual_pipeline_stages;
  const std::string& name = config.parallel.schedule;
  if (v == 1 && pipeline::is_schedule_name(name)) return pipeline::default_virtual_stages(name);
  return v;
}

double training_bytes_per_param_byte(const config::OptimizerConfig& optimizer) {
  return 1.0 + optimizer.state_tensors_per_param();
}

Plan make_plan(const config::RunConfig& config, int num_microbatches, int pp_rank, ScheduleCache* cache) {
  return make_plan(config, num_microbatches, pp_rank, unresolved_cpu_kernels(config), cache);
}

Plan make_plan(const config::RunConfig& config, int num_microbatches, int pp_rank, const CpuKernels& cpu,
               ScheduleCache* cache) {
  Plan plan;
  plan.spec = model_spec(config.model);
  const auto costs = partition::model_costs(plan.spec, DType::kF32, config.train.recompute);
  const std::shared_ptr<const ScheduleCache::Entry> schedules =
      compute_and_lowered(config, num_microbatches, costs.size(), cache);
  const pipeline::Schedule& compute = schedules->compute;
  plan.schedule = schedules->lowered;
  // The key, or a schedule file saved with its pairs overlapped (schedule_text.hpp: lowering a compute-only file
  // puts communication between the pairs' two actions, so they are made adjacent again).
  if (config.parallel.moe_a2a_overlap || compute.overlap_fb_pairs) {
    plan.schedule = pipeline::overlap_fb_pairs(plan.schedule);
  }

  // A schedule file's stages (a named schedule and auto were checked before they were built).
  const int num_stages = plan.schedule.num_stages;
  check_stage_count(num_stages, plan.schedule.pp_size, plan.schedule.virtual_stages, costs.size(), "parallel.schedule",
                    config.model.type);
  const std::int64_t micro = config.resolved_batch().micro_batch_size;
  const double per_param_byte = 1.0 + training_bytes_per_param_byte(config.optimizer);
  std::vector<partition::BlockProfile> blocks;
  for (const auto& c : costs) {
    blocks.push_back({c.total_flops(), static_cast<std::int64_t>(static_cast<double>(c.param_bytes) * per_param_byte),
                      c.activation_bytes * micro});
  }
  partition::PartitionOptions options;
  options.method = config.parallel.partition.method;
  for (auto n : config.parallel.partition.blocks_per_stage) options.blocks_per_stage.push_back(static_cast<int>(n));
  for (int stage = 0; stage < num_stages; ++stage) {
    const auto& actions = compute.ranks[static_cast<std::size_t>(compute.rank_of(stage))];
    options.inflight_microbatches.push_back(static_cast<double>(pipeline::peak_activations(actions)));
  }
  plan.tp_size = config.parallel.tensor_model_parallel_size;
  if (plan.tp_size > 1) partition::check_tensor_parallel(plan.spec, plan.tp_size);
  plan.sequence_parallel = config.parallel.sequence_parallel;
  partition::check_sequence_parallel(plan.spec, plan.tp_size, plan.sequence_parallel);
  plan.cp_size = config.parallel.context_parallel_size;
  partition::check_context_parallel(plan.spec, plan.tp_size, plan.cp_size,
                                    config.parallel.context_parallel_comm == config::ContextParallelComm::kRing,
                                    plan.sequence_parallel && plan.tp_size > 1);
  // Balance time first; only when that split exceeds the memory cap ask the partitioner for one that
  // respects it. The message that reaches the user is the per-category estimate of the balanced split.
  plan.partition = partition::partition_stages(blocks, num_stages, options);
  std::string violation = memory_plan_violation(plan, config, cpu);
  if (!violation.empty() && options.method == partition::PartitionMethod::kCost && num_stages > 1) {
    options.memory_cap_bytes = config.device.memory_limit;
    try {
      Plan capped = plan;
      capped.partition = partition::partition_stages(blocks, num_stages, options);
      if (memory_plan_violation(capped, config, cpu).empty()) {
        plan.partition = capped.partition;
        violation.clear();
      }
    } catch (const Error&) {
      // No split fits the partitioner's estimate either: report the balanced split's numbers below.
    }
  }
  // Bad input (exit 64): the config's layout does not fit its own cap, and no restart of it can change that.
  CLEAVE_CHECK_INPUT(violation.empty(), "{}", violation);
  plan.local_stages = plan.stages_on(pp_rank);
  return plan;
}

std::vector<int> Plan::stages_on(int pp_rank) const {
  std::vector<int> stages;
  for (int stage = 0; stage < schedule.num_stages; ++stage) {
    if (schedule.rank_of(stage) == pp_rank) stages.push_back(stage);
  }
  return stages;
}

Shape Plan::boundary_shape(int stage, std::int64_t micro_batch) const {
  const auto& block = spec.blocks[static_cast<std::size_t>(partition.stages[static_cast<std::size_t>(stage)].begin)];
  std::vector<std::int64_t> dims = {micro_batch};
  for (auto d : partition::tp_block_input(block, tp_size, sequence_parallel).dims()) dims.push_back(d);
  if (cp_size > 1) dims[1] /= cp_size;  // the sequence dimension of every language-model boundary
  return Shape(std::span<const std::int64_t>(dims));
}

int Plan::stage_of_block(partition::BlockKind kind) const {
  for (std::size_t b = 0; b < spec.blocks.size(); ++b) {
    if (spec.blocks[b].kind != kind) continue;
    for (int stage = 0; stage < num_stages(); ++stage) {
      const auto& range = partition.stages[static_cast<std::size_t>(stage)];
      if (range.begin <= static_cast<int>(b) && static_cast<int>(b) < range.end) return stage;
    }
  }
  return -1;
}

bool Plan::tied_table_split() const {
  if (!partition::is_language_model(spec.type) || !spec.token_sizes().tie_embeddings) return false;
  return stage_to_rank(stage_of_block(partition::BlockKind::kEmbedding)) !=
         stage_to_rank(stage_of_block(partition::BlockKind::kLmHead));
}

std::string Plan::describe_partition() const {
  return fmt::format("blocks per stage [{}]", fmt::join(partition.blocks_per_stage(), ","));
}

std::string Plan::schedule_label() const {
  if (schedule.pp_size > 1) return schedule.name;
  if (num_stages() > 1) return fmt::format("{} on one rank, running its {} chunks", schedule.name, num_stages());
  return "single stage";
}

std::string Plan::describe_schedule() const {
  return schedule.pp_size > 1 || num_stages() > 1 ? "schedule " + schedule_label() : schedule_label();
}

}  // namespace cleave::run_plan
