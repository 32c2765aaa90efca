// See plan_search.hpp.
#include "engine/planner/plan_search.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "engine/config/config.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/planner/plan_candidate.hpp"
#include "engine/planner/plan_memory.hpp"
#include "engine/planner/plan_pricing.hpp"
#include "engine/planner/world_limit.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cp_rules.hpp"
#include "partition/ep_rules.hpp"
#include "partition/tp_rules.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::planner {
namespace {

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

// The global batch a plan keeps: the config's batch.global_batch_size, or what its own layout resolves to.
std::int64_t fixed_global_batch(const config::RunConfig& base, int world) {
  if (base.batch.global_batch_size) return *base.batch.global_batch_size;
  config::RunConfig copy = base;
  try {
    copy.resolve(world);
  } catch (const Error& e) {
    CLEAVE_THROW("plan: the planner keeps the global batch fixed; set batch.global_batch_size (the config's own "
                 "layout does not resolve on {}: {})", count_of(world, "rank"), e.what());
  }
  return copy.resolved_batch().global_batch_size;
}

}  // namespace

void check_profile_matches(const HardwareProfile& profile, const partition::ModelSpec& spec, bool bf16) {
  if (!profile.measured.has_blocks()) return;
  partition::check_measured_covers(profile.measured, spec, bf16 ? DType::kBF16 : DType::kF32, partition::kAnyWidth,
                                   "'" + profile.name + "'");
}

std::string oversubscription_warning(const PlanEstimate& e) {
  if (!e.oversubscribed()) return "";
  const double per_core = static_cast<double>(e.ranks_on_node) / e.cores_per_node;
  const std::string head = fmt::format("{} puts {} ranks on a node of {} cores ({:.1f} ranks per core): each rank "
                                       "computes on {:.2f} of a core, priced {:.2f}x the profile's compute",
                                       e.choice.layout(), e.ranks_on_node, e.cores_per_node, per_core,
                                       static_cast<double>(e.cores_per_node) / e.ranks_on_node, e.core_sharing);
  std::string holders =
      e.core_holder_wait_s > 0
          ? fmt::format("; each pipeline transfer's receiver waits {:.3f} ms for the rank holding its core to end an "
                        "action (not running 1 - 1/{:.1f} of the time, half the pipeline's mean action on a core)",
                        e.core_holder_wait_s * 1e3, per_core)
          : "";
  const std::string experts =
      e.ep_core_holder_wait_s > 0
          ? fmt::format("; each ep all-to-all and count exchange waits {:.3f} ms for the ranks holding its peers' "
                        "cores ({} peers, each not running 1 - 1/{:.1f} of the time, half the mean action between "
                        "meetings)",
                        e.ep_core_holder_wait_s * 1e3, e.choice.ep - 1, per_core)
          : "";
  holders += experts;
  if (e.group_core_holder_wait_s > 0) {
    holders += fmt::format("; each tp collective, cp all-to-all and cp ring hop waits {:.3f} ms per peer for the rank "
                           "holding that peer's core (not running 1 - 1/{:.1f} of the time, half the mean action "
                           "between meetings)",
                           e.group_core_holder_wait_s * 1e3, per_core);
  }
  if (e.handoff_s > 0 || e.time_shared_compute > 1) {
    return head + fmt::format(" ({:.3f}x of it the measured cost of sharing a core) and {:.1f} us per handoff to a "
                              "descheduled peer, at least one per phase of every collective with peers, priced from "
                              "the profile's time sharing{}; cleave plan --trial K measures them",
                              e.time_shared_compute, e.handoff_s * 1e6, holders);
  }
  return head + holders +
         "; ranks that wait for a core also wait for each other at every collective inside a pass (a "
         "descheduled peer's time slice: not priced, the profile has no time_sharing measurement), so measured "
         "steps can be slower still (cleave plan --trial K measures them)";
}

std::string PlanChoice::dense_layout() const {
  if (cp > 1) {
    return fmt::format("tp{} cp{}{} pp{} dp{}", tp, cp, cp_comm == config::ContextParallelComm::kAllToAll ? "a2a" : "",
                       pp, dp);
  }
  return fmt::format("tp{} pp{} dp{}", tp, pp, dp);
}

std::string PlanChoice::layout() const {
  const std::string ep_part = ep > 1 ? fmt::format(" ep{}", ep) : "";
  return dense_layout() + ep_part;
}

std::string PlanChoice::zero_label() const {
  const char* reduce = zero_stage < 2                                   ? ""
                       : zero_reduce == config::ZeroReduce::kPerMicrobatch ? "m"
                       : zero_reduce == config::ZeroReduce::kPerStep       ? "s"
                                                                           : "";
  return fmt::format("{}{}", zero_stage, reduce);
}

std::vector<std::string> PlanChoice::overrides() const {
  std::vector<std::string> keys = {fmt::format("parallel.tensor_model_parallel_size={}", tp),
          fmt::format("parallel.pipeline_model_parallel_size={}", pp),
          fmt::format("parallel.data_parallel_size={}", dp),
          fmt::format("parallel.virtual_pipeline_stages={}", virtual_stages),
          fmt::format("parallel.schedule={}", schedule),
          fmt::format("batch.micro_batch_size={}", micro_batch),
          fmt::format("batch.global_batch_size={}", global_batch),
          fmt::format("batch.gradient_accumulation_steps={}", global_batch / (micro_batch * dp)),
          fmt::format("optimizer.zero_stage={}", zero_stage),
          fmt::format("parallel.sequence_parallel={}", sequence_parallel),
          fmt::format("train.recompute={}", recompute)};
  if (zero_stage >= 2 && zero_reduce != config::ZeroReduce::kAuto) {
    keys.push_back(fmt::format("optimizer.zero_reduce={}", zero_reduce));
  }
  // cp and ep are written at 1 too, as apply_to() sets them: a source config at cp 2 or ep 2 keeps that value
  // under a plan without them otherwise (--write, --trial and cleave run's re-plan would launch another layout).
  keys.push_back(fmt::format("parallel.context_parallel_size={}", cp));
  keys.push_back(fmt::format("parallel.context_parallel_comm={}", cp_comm));
  keys.push_back(fmt::format("parallel.expert_model_parallel_size={}", ep));
  keys.push_back(fmt::format("parallel.ep_stash_imbalance={}", ep_stash_imbalance));
  keys.push_back(fmt::format("parallel.ep_peak_imbalance={}", ep_peak_imbalance));
  return keys;
}

config::RunConfig PlanChoice::apply_to(const config::RunConfig& base) const {
  config::RunConfig c = base;
  auto& p = c.parallel;
  p.tensor_model_parallel_size = tp;
  p.pipeline_model_parallel_size = pp;
  p.data_parallel_size = dp;
  p.virtual_pipeline_stages = virtual_stages;
  p.schedule = schedule;
  c.batch.micro_batch_size = micro_batch;
  c.batch.global_batch_size = global_batch;
  c.batch.gradient_accumulation_steps = global_batch / (micro_batch * dp);
  c.optimizer.zero_stage = zero_stage;
  if (zero_stage >= 2 && zero_reduce != config::ZeroReduce::kAuto) c.optimizer.zero_reduce = zero_reduce;
  p.sequence_parallel = sequence_parallel;
  p.context_parallel_size = cp;
  p.context_parallel_comm = cp_comm;
  p.expert_model_parallel_size = ep;
  p.ep_stash_imbalance = ep_stash_imbalance;
  p.ep_peak_imbalance = ep_peak_imbalance;
  c.train.recompute = recompute;
  config::validate(c);
  return c;
}

PlanChoice choice_of_config(const std::string& config_path, const std::vector<std::string>& overrides, int world) {
  config::RunConfig config =
      config::load_config(config_path, overrides);
  config.resolve(world);
  const auto batch = config.resolved_batch();
  PlanChoice c;
  c.tp = config.parallel.tensor_model_parallel_size;
  c.pp = config.parallel.pipeline_model_parallel_size;
  c.dp = config.parallel.data_parallel_size;
  c.virtual_stages = run_plan::effective_virtual_stages(config);
  c.schedule = config.parallel.schedule;
  c.micro_batch = batch.micro_batch_size;
  c.zero_stage = config.optimizer.zero_stage;
  c.recompute = config.train.recompute;
  c.global_batch = batch.global_batch_size;
  c.sequence_parallel = config.parallel.sequence_parallel;
  c.zero_reduce = config::resolved_zero_reduce(config);
  c.cp = config.parallel.context_parallel_size;
  c.cp_comm = config.parallel.context_parallel_comm;
  c.ep = config.parallel.expert_model_parallel_size;
  c.ep_stash_imbalance = config.parallel.ep_stash_imbalance;
  c.ep_peak_imbalance = config.parallel.ep_peak_imbalance;
  return c;
}

PlanEstimate estimate_plan(const std::string& config_path, const std::vector<std::string>& overrides,
                           const PlanChoice& choice, const HardwareProfile& profile, const SearchOptions& options,
                           PlanDetails* details) {
  config::RunConfig base;
  try {
    base = config::load_config(config_path, overrides);
  } catch (const Error& e) {
    PlanEstimate est;
    est.choice = choice;
    est.reason = e.what();
    return est;
  }
  return estimate_plan(base, config_path.empty() ? "<defaults>" : config_path, overrides, choice, profile, options,
                       details);
}

DeviceType planned_device(const config::RunConfig& config, const HardwareProfile& profile) {
  return profile.device_type == DeviceType::kCuda ? DeviceType::kCuda : config.device.type;
}

PlanEstimate estimate_plan(const config::RunConfig& base, std::string_view origin,
                           const std::vector<std::string>& overrides, const PlanChoice& choice,
                           const HardwareProfile& profile, const SearchOptions& options, PlanDetails* details,
                           SearchCache* cache) {
  PlanEstimate est;
  est.choice = choice;
  const std::optional<PlanCandidate> candidate =
      plan_candidate(base, origin, overrides, choice, profile, options, cache, est.reason);
  if (!candidate) return est;
  const config::RunConfig& config = candidate->config;
  const run_plan::Plan& plan = candidate->plan;
  est.valid = true;
  const SearchOptions opts = with_ep_imbalance(options, plan, choice, profile, cache);
  const bool bf16 = config.device.precision == config::Precision::kBf16;
  const run_plan::CpuKernels cpu = planned_cpu_kernels(config, profile, options.world);
  const std::vector<std::int64_t> working_set = estimate_memory(plan, config, choice, opts, cpu, est, details);
  check_fit(options.memory_limit, est);
  const std::string gap = measured_gap(profile, plan, choice, options.world, bf16);
  if (!gap.empty()) {
    est.valid = est.fits = false;
    est.reason = gap;
    return est;
  }
  if (!est.fits && !options.price_over_cap) return est;  // known by its memory (SearchOptions::price_over_cap)
  price_step(plan, config, choice, profile, options, opts, working_set, cpu, cache, est, details);
  return est;
}

PlanningSetup planning_setup(const config::RunConfig& base, const std::string& profile_path,
                             const std::string& limit_text, int world) {
  PlanningSetup s;
  // A --profile file that is missing, not JSON or not a profile is the command line's input (exit 64).
  s.profile = profile_path.empty() ? measure_this_machine(run_plan::model_spec(base.model), world)
                                   : reading_input([&] { return load_profile(profile_path); });
  // A CPU profile describes the machine it measured, and a plan runs there: every rank on that one node, sharing
  // its cores (its ranks_per_node, the ranks the profile was made for, would otherwise spread a larger world over
  // imaginary nodes of the same cores, and the sharing would go unpriced and unsaid).
  // Its device memory (the machine's memory over the ranks it was made for) is shared by the world the same way.
  if (s.profile.device_type == DeviceType::kCpu && s.profile.cores_per_node > 0 && world > s.profile.ranks_per_node) {
    s.profile.device_memory = s.profile.device_memory * s.profile.ranks_per_node / world;
    s.profile.ranks_per_node = world;
  }
  check_profile_matches(s.profile, run_plan::model_spec(base.model), base.device.precision == config::Precision::kBf16);
  s.options.world = world;
  s.options.memory_limit = !limit_text.empty()            ? parse_bytes(limit_text, "--memory-limit")
                           : base.device.memory_limit > 0 ? base.device.memory_limit
                                                          : s.profile.device_memory;
  return s;
}

namespace {

// The tp sizes searched: each the family allows that divides the world and stays within a node (1 for a family
// without tensor parallelism).
std::vector<int> tp_candidates(const config::RunConfig& base, const HardwareProfile& profile, int world) {
  const auto tp_sizes = partition::family(base.model.type).tp_sizes;
  if (!tp_sizes) return {1};
  std::vector<int> tps;
  for (auto t : tp_sizes(base.model)) {
    if (world % t == 0 && t <= profile.ranks_per_node) tps.push_back(static_cast<int>(t));
  }
  return tps;
}

// The recompute modes searched: all three for a language model, none otherwise.
std::vector<partition::Recompute> recompute_candidates(partition::ModelType model_type) {
  using partition::Recompute;
  if (partition::is_language_model(model_type)) return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  return {Recompute::kNone};
}

// Context parallelism (language models): each cp size the model allows at `tp` for some exchange, with each exchange
// that allows it (ring first: no head rule); the config checks refuse the rest as invalid candidates. cp 1 first.
std::vector<std::pair<int, config::ContextParallelComm>> cp_candidates(const partition::ModelSpec& spec, int world,
                                                                       int tp) {
  using CpComm = config::ContextParallelComm;
  std::vector<std::pair<int, CpComm>> cps = {{1, CpComm::kRing}};
  for (int cp : divisors(world / tp)) {
    if (cp == 1 || !partition::has_attention(spec)) continue;
    for (CpComm comm : {CpComm::kRing, CpComm::kAllToAll}) {
      const auto ok = partition::allowed_cp_sizes(spec, tp, comm == CpComm::kRing, false, cp);
      if (ok.back() == cp) cps.push_back({cp, comm});
    }
  }
  return cps;
}

// Expert parallelism (moe models): every ep the experts and the dp × cp ranks allow (partition/ep_rules.hpp); 1 first.
std::vector<int> ep_candidates(const partition::ModelSpec& spec, int dp, int cp) {
  std::vector<int> eps = {1};
  if (partition::routed_experts(spec) == 0) return eps;
  for (const std::int64_t ep : partition::allowed_ep_sizes(spec, static_cast<std::int64_t>(dp) * cp)) {
    if (ep > 1) eps.push_back(static_cast<int>(ep));
  }
  return eps;
}

// The schedules searched with their virtual stages: 1f1b alone at pp 1; else every schedule at its default, and
// interleaved 1F1B at 4 as well.
std::vector<std::pair<std::string, int>> schedule_candidates(int pp) {
  if (pp == 1) return {{"1f1b", 1}};
  std::vector<std::pair<std::string, int>> schedules;
  for (auto name : pipeline::schedule_names()) {
    const std::string n(name);
    schedules.push_back({n, pipeline::default_virtual_stages(n)});
    if (n == "interleaved_1f1b") schedules.push_back({n, 4});
  }
  return schedules;
}

// ZeRO-2/3: both reduction forms, where the per-micro-batch one applies (config::resolved_zero_reduce); kAuto below.
std::vector<config::ZeroReduce> zero_reduce_candidates(int zero, bool deterministic, bool sp) {
  if (zero < 2) return {config::ZeroReduce::kAuto};
  if (!deterministic && !sp) return {config::ZeroReduce::kPerMicrobatch, config::ZeroReduce::kPerStep};
  return {config::ZeroReduce::kPerStep};
}

// The layout tp × cp × pp × dp refused outright: dp does not divide the global batch.
PlanEstimate refused_layout(int tp, int pp, int dp, int cp, config::ContextParallelComm cp_comm, std::int64_t global) {
  PlanEstimate refused;
  refused.choice = PlanChoice{tp, pp, dp, 1, "-", 1, 0, partition::Recompute::kNone, global, false};
  refused.choice.cp = cp;
  refused.choice.cp_comm = cp_comm;
  refused.reason = fmt::format("batch.global_batch_size {} is not divisible by dp {}", global, dp);
  return refused;
}

// The candidates one search shares: the config, its origin and overrides, the profile, the options and the cache.
struct SearchInputs {
  const config::RunConfig& base;
  const std::string& origin;
  const std::vector<std::string>& overrides;
  const HardwareProfile& profile;
  const SearchOptions& options;
  const std::vector<partition::Recompute>& recomputes;
};

// Every plan of one layout (tp, cp, pp, dp: the global batch divides over dp) estimated into `out`: ranked when it
// fits, rejected otherwise; over schedules, micro-batches, ZeRO stages, sequence parallelism, ZeRO reductions,
// recompute modes and ep, in that order.
void estimate_layout(const SearchInputs& in, const std::vector<int>& eps, int tp, int pp, int dp, int cp,
                     config::ContextParallelComm cp_comm, std::int64_t global, SearchCache& cache, SearchResult& out) {
  for (const auto& [schedule, v] : schedule_candidates(pp)) {
    for (int micro : divisors(global / dp)) {
      for (int zero : dp * cp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0}) {
        for (bool sp : tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
          for (const config::ZeroReduce reduce : zero_reduce_candidates(zero, in.base.train.deterministic, sp)) {
            for (const partition::Recompute recompute : in.recomputes) {
              for (const int ep : eps) {
                PlanChoice c{tp, pp, dp, v, schedule, micro, zero, recompute, global, sp, reduce, cp, cp_comm};
                c.ep = ep;
                if (ep == in.base.parallel.expert_model_parallel_size) {  // the config's figures hold at its ep only
                  c.ep_stash_imbalance = in.base.parallel.ep_stash_imbalance;
                  c.ep_peak_imbalance = in.base.parallel.ep_peak_imbalance;
                }
                PlanEstimate e =
                    estimate_plan(in.base, in.origin, in.overrides, c, in.profile, in.options, nullptr, &cache);
                (e.fits ? out.ranked : out.rejected).push_back(std::move(e));
              }
            }
          }
        }
      }
    }
  }
}

// Fastest first; equal times: less peak memory, then fewer bytes communicated (stable: the search's order else).
void rank_fastest_first(std::vector<PlanEstimate>& ranked) {
  std::stable_sort(ranked.begin(), ranked.end(), [](const PlanEstimate& a, const PlanEstimate& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    return a.comm_bytes < b.comm_bytes;
  });
}

}  // namespace

SearchResult search_plans(const std::string& config_path, const std::vector<std::string>& overrides,
                          const HardwareProfile& profile, const SearchOptions& options) {
  CLEAVE_CHECK(options.world >= 1, "plan: --world must be >= 1, got {}", options.world);
  const config::RunConfig base = config::load_config(config_path, overrides);
  const std::string origin = config_path.empty() ? "<defaults>" : config_path;
  const std::int64_t global = fixed_global_batch(base, options.world);
  SearchResult out;
  out.memory_limit = options.memory_limit;
  out.unit = partition::is_language_model(base.model.type) ? "tok" : "samples";
  SearchOptions opts = options;
  opts.memory_limit = out.memory_limit;
  opts.price_over_cap = false;  // cleave plan reads an over-cap plan's memory, never its time
  // What the candidates share, built once (search_cache.hpp: the schedules, each validated for the simulator once,
  // the ep imbalance's integral).
  SearchCache cache;
  const std::vector<partition::Recompute> recomputes = recompute_candidates(base.model.type);
  const partition::ModelSpec spec = partition::make_model_spec(base.model.type, base.model);
  check_world_within_reach(base, spec, profile, options.world, global);
  const SearchInputs in{base, origin, overrides, profile, opts, recomputes};
  int layouts = 0;
  for (int tp : tp_candidates(base, profile, options.world)) {
    for (const auto& [cp, cp_comm] : cp_candidates(spec, options.world, tp)) {
      for (int pp : divisors(options.world / (tp * cp))) {
        const int dp = options.world / (tp * cp * pp);
        if (global % dp != 0) {
          out.rejected.push_back(refused_layout(tp, pp, dp, cp, cp_comm, global));
          continue;
        }
        ++layouts;
        estimate_layout(in, ep_candidates(spec, dp, cp), tp, pp, dp, cp, cp_comm, global, cache, out);
      }
    }
  }
  CLEAVE_CHECK(layouts > 0, "plan: no layout of {} ranks fits this config: tp must divide n_heads and d_ff (and stay "
               "within a node of {} ranks), and dp must divide batch.global_batch_size {}", options.world,
               profile.ranks_per_node, global);
  rank_fastest_first(out.ranked);
  return out;
}

}  // namespace cleave::planner
