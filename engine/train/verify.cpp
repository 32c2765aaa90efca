// See verify.hpp.
#include "engine/train/verify.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::train {
namespace {

struct Run {
  std::vector<double> losses;
  ParameterMap params;
  ParameterMap initial;      // before the first step (keep_initial only)
  ParameterMap sensitivity;  // AdamW's S_i over the steps (track_sensitivity only; verify_adamw_bound.hpp)
  std::vector<RoutingStep> routing;  // per step, what a moe model routed (routing_of); empty without routed blocks
};

// `plan`: the layout's plan made before the world (train::plan_before_world), taken instead of made again.
// `track_sensitivity` (a one-rank AdamW run on the cpu): AdamW's per-element sensitivity from its v after each step.
Run run(const config::RunConfig& config, comm::Communicator& comm, bool keep_initial = false,
        std::optional<run_plan::Plan> plan = std::nullopt, bool track_sensitivity = false) {
  Trainer trainer = plan ? Trainer(config, *std::move(plan), comm) : Trainer(config, comm);
  Run r;
  if (keep_initial) r.initial = trainer.gather_parameters();
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    const StepStats stats = trainer.step(s);
    r.losses.push_back(stats.loss);
    if (!stats.routing.empty()) r.routing.push_back(routing_of(stats.routing));
    if (track_sensitivity) {
      add_adamw_sensitivity(r.sensitivity, trainer.local_optimizer_state("exp_avg_sq"), config.optimizer,
                            config.train.steps, s);
    }
  }
  r.params = trainer.gather_parameters();
  return r;
}

// Each twin trained on `self` from the reference's seed: its final parameters, how it differs from the reference
// config, and the largest loss difference from the reference over all twins.
struct TwinRuns {
  std::vector<ParameterMap> params;
  std::vector<std::string> described;
  double loss = 0;
  std::vector<double> step_losses;  // per step, the largest over the twins
};

TwinRuns train_twins(const std::vector<config::RunConfig>& twins, const config::RunConfig& reference_config,
                     const Run& reference, comm::Communicator& self) {
  TwinRuns out;
  for (const config::RunConfig& twin : twins) {
    Run r = run(twin, self);
    out.described.push_back(describe_twin(reference_config, twin));
    out.loss = std::max(out.loss, max_loss_difference(r.losses, reference.losses));
    out.step_losses = largest_per_step(out.step_losses, loss_differences(r.losses, reference.losses));
    out.params.push_back(std::move(r.params));
  }
  return out;
}

// The twins' floor: each twin trained on `self`, then every pair among the reference and the twins compared
// (floor_pairs: all start from the reference's initial values).
NoiseFloor twins_floor(const std::vector<config::RunConfig>& twins, const config::RunConfig& reference_config,
                       const Run& reference, comm::Communicator& self,
                       const std::vector<partition::NullGradient>& null_slices, double null_bound, double multiple,
                       double tp_factor, double flip) {
  TwinRuns t = train_twins(twins, reference_config, reference, self);
  std::vector<FloorPair> pairs = floor_pairs(reference.params, reference.initial, t.params, null_slices, null_bound);
  NoiseFloor f = noise_floor(std::move(pairs), t.loss, std::move(t.described), multiple, tp_factor, flip);
  f.step_losses = std::move(t.step_losses);
  return f;
}

// fp32 AdamW's order floor: each order twin trained on `self`, every pair among the reference and the twins compared
// (order_floor; as the bf16 floor's pairs: each is two equivalent runs); and from the same pairs the per-element
// bound's gradient noise per tensor (verify_adamw_bound.hpp), with the reference's sensitivity.
struct OrderFloors {
  RoundingFloor floor;
  ElementBound element;
};

OrderFloors order_twins_floor(const std::vector<config::RunConfig>& twins, const config::RunConfig& reference_config,
                              const Run& reference, comm::Communicator& self,
                              const std::vector<partition::NullGradient>& null_slices, double null_bound,
                              double factor) {
  const TwinRuns t = train_twins(twins, reference_config, reference, self);
  std::vector<ParamComparison> compared;
  std::vector<std::pair<const ParameterMap*, const ParameterMap*>> pairs;
  for (const ParameterMap& p : t.params) {
    compared.push_back(compare_parameters(p, reference.params, null_slices, null_bound));
    pairs.emplace_back(&p, &reference.params);
  }
  for (std::size_t j = 0; j < t.params.size(); ++j) {
    for (std::size_t k = j + 1; k < t.params.size(); ++k) {
      compared.push_back(compare_parameters(t.params[k], t.params[j], null_slices, null_bound));
      pairs.emplace_back(&t.params[k], &t.params[j]);
    }
  }
  OrderFloors out{order_floor(compared, t.described, t.loss, factor), {}};
  out.element.noise = gradient_noise(pairs, reference.sensitivity, null_slices);
  out.element.sensitivity = reference.sensitivity;
  out.element.factor = factor;
  out.element.cap = null_bound;
  return out;
}

// The absolute difference the tensor rules allow every element of `d`'s tensor: --param-tolerance of its scale, or
// the order floor's tolerance.
double tensor_tolerance(const ParamDifference& d, double param_tolerance, const RoundingFloor* rounding) {
  const double scale = d.normalised > 0 && std::isfinite(d.normalised) ? d.max_abs / d.normalised : 0.0;
  const double floor = rounding != nullptr && std::isfinite(rounding->tolerance(d.name)) ? rounding->tolerance(d.name)
                                                                                          : 0.0;
  return std::max(param_tolerance * scale, floor);
}

}  // namespace

config::RunConfig single_rank_reference(const config::RunConfig& config) {
  CLEAVE_ASSERT(config.parallel.data_parallel_size > 0, "single_rank_reference needs a resolved config");
  const config::ResolvedBatch batch = config.resolved_batch();
  config::RunConfig single = config;
  single.parallel.tensor_model_parallel_size = 1;
  single.parallel.sequence_parallel = false;
  single.parallel.context_parallel_size = 1;  // the whole sequence on one rank, positions from 0
  single.parallel.expert_model_parallel_size = 1;  // every expert on the one rank
  single.parallel.pipeline_model_parallel_size = 1;
  single.parallel.data_parallel_size = -1;
  single.parallel.virtual_pipeline_stages = 1;
  single.parallel.schedule = "1f1b";
  single.parallel.partition = {};
  single.optimizer.zero_stage = 0;
  // Same global and micro batch: the reference accumulates what the replicas computed in parallel.
  single.batch.global_batch_size = batch.global_batch_size;
  single.batch.micro_batch_size = batch.micro_batch_size;
  single.batch.gradient_accumulation_steps.reset();
  return single;
}

double tp_rounding_factor(int tp_size) {
  const double roundings = tp_size > 1 ? tp_size + 2.0 : 2.0;  // in a tp-reduced value's difference from one rank's
  return std::sqrt(roundings / 2.0);
}

double default_loss_tolerance(const config::RunConfig& config) {
  if (config.device.precision != ops::Precision::kBf16) return 1e-5;
  const double tokens = static_cast<double>(config.resolved_batch().global_batch_size) *
                        static_cast<double>(config::token_seq_len(config.model));
  return std::ldexp(1.0, -8) / std::sqrt(std::max(tokens, 1.0)) *
         tp_rounding_factor(config.parallel.tensor_model_parallel_size);
}

std::vector<double> loss_differences(const std::vector<double>& layout, const std::vector<double>& reference) {
  std::vector<double> out;
  for (std::size_t i = 0; i < layout.size() && i < reference.size(); ++i) {
    const double rel = std::abs(layout[i] - reference[i]) / std::max(std::abs(reference[i]), 1e-12);
    out.push_back(std::isnan(rel) ? std::numeric_limits<double>::infinity() : rel);
  }
  return out;
}

std::vector<double> largest_per_step(std::vector<double> a, const std::vector<double>& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0.0);
  for (std::size_t i = 0; i < b.size(); ++i) a[i] = std::isnan(b[i]) || std::isnan(a[i]) ? b[i] : std::max(a[i], b[i]);
  return a;
}

bool losses_within(const std::vector<double>& layout, const std::vector<double>& reference, double tolerance,
                   const std::vector<double>& floor, double factor) {
  if (layout.size() != reference.size()) return false;
  const std::vector<double> d = loss_differences(layout, reference);
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double by_floor = i < floor.size() && std::isfinite(floor[i]) ? factor * floor[i] : 0.0;
    if (!(d[i] <= std::max(tolerance, by_floor))) return false;
  }
  return true;
}

RoutingStep routing_of(std::span<const std::pair<std::string, double>> fields) {
  RoutingStep r;
  for (const auto& [name, value] : fields) {
    if (name.rfind("moe_tokens_e", 0) == 0) r.tokens.push_back(value);
    if (name == "moe_load_imbalance") r.imbalance = value;
  }
  return r;
}

std::optional<RoutingDivergence> first_routing_divergence(const std::vector<RoutingStep>& layout,
                                                          const std::vector<RoutingStep>& reference) {
  for (std::size_t s = 0; s < layout.size() && s < reference.size(); ++s) {
    const RoutingStep& a = layout[s];
    const RoutingStep& b = reference[s];
    if (a.tokens == b.tokens && a.imbalance == b.imbalance) continue;
    RoutingDivergence d{static_cast<std::int64_t>(s + 1), 0, a.tokens, b.tokens};
    double moved = 0;
    for (std::size_t e = 0; e < a.tokens.size() || e < b.tokens.size(); ++e) {
      moved += std::abs((e < a.tokens.size() ? a.tokens[e] : 0.0) - (e < b.tokens.size() ? b.tokens[e] : 0.0));
    }
    // A token sent to another expert moves one count down and one up; a swap between blocks shows in the imbalance.
    d.moved = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(moved / 2)));
    return d;
  }
  return std::nullopt;
}

double max_loss_difference(const std::vector<double>& layout, const std::vector<double>& reference) {
  double worst = 0;
  for (std::size_t i = 0; i < layout.size() && i < reference.size(); ++i) {
    const double rel = std::abs(layout[i] - reference[i]) / std::max(std::abs(reference[i]), 1e-12);
    worst = std::isnan(rel) ? std::numeric_limits<double>::infinity() : std::max(worst, rel);
  }
  return worst;
}

VerifyReport verify_layout(const config::RunConfig& config, comm::Communicator& world, const VerifyOptions& options,
                           std::optional<run_plan::Plan> layout_plan) {
  VerifyReport report;
  report.adamw = config.optimizer.type == config::OptimizerType::kAdamw;
  const partition::ModelSpec spec = run_plan::model_spec(config.model);
  report.routed = std::any_of(spec.blocks.begin(), spec.blocks.end(),
                              [](const partition::BlockSpec& b) { return b.n_experts > b.top_k; });
  config::RunConfig resolved = config;
  resolved.resolve(world.size());
  const Run layout = run(resolved, world, false, std::move(layout_plan));
  report.layout_losses = layout.losses;
  auto self = world.split(world.rank(), 0, "verify_reference");
  if (world.rank() != 0) return report;
  const config::RunConfig reference_config = single_rank_reference(resolved);
  const std::vector<config::RunConfig> twins =
      options.noise_multiple > 0 ? twin_references(reference_config) : std::vector<config::RunConfig>{};
  const std::vector<config::RunConfig> orders =
      options.noise_multiple > 0 ? order_twins(reference_config) : std::vector<config::RunConfig>{};
  const Run reference = run(reference_config, *self, !twins.empty(), std::nullopt, !orders.empty());
  report.reference_losses = reference.losses;
  report.max_loss_difference = max_loss_difference(layout.losses, reference.losses);
  report.routing_diverged = first_routing_divergence(layout.routing, reference.routing);
  report.routing_compared = !layout.routing.empty() && !reference.routing.empty();
  const std::vector<partition::NullGradient> null_slices = verify_null_slices(resolved);
  const double null_bound = adamw_drift_bound(resolved.optimizer, resolved.train.steps);
  const ParameterMap* initial = twins.empty() ? nullptr : &reference.initial;
  if (!twins.empty()) {
    report.floor = twins_floor(twins, reference_config, reference, *self, null_slices, null_bound,
                               options.noise_multiple, tp_rounding_factor(resolved.parallel.tensor_model_parallel_size),
                               adamw_flip_fraction(resolved.optimizer, resolved.train.steps));
  }
  const std::optional<config::RunConfig> fp32 =
      options.noise_multiple > 0 ? precision_twin(reference_config) : std::nullopt;
  if (fp32) {
    const Run fp32_run = run(*fp32, *self);
    const double factor = options.noise_multiple * tp_rounding_factor(resolved.parallel.tensor_model_parallel_size);
    report.rounding = rounding_floor(compare_parameters(fp32_run.params, reference.params, null_slices, null_bound),
                                     max_loss_difference(fp32_run.losses, reference.losses), factor);
    report.rounding->step_losses = loss_differences(fp32_run.losses, reference.losses);
  }
  if (!orders.empty()) {
    const double factor = options.noise_multiple * tp_rounding_factor(resolved.parallel.tensor_model_parallel_size);
    OrderFloors f = order_twins_floor(orders, reference_config, reference, *self, null_slices, null_bound, factor);
    report.rounding = std::move(f.floor);
    report.element_bound = std::move(f.element);
  }
  ParamComparison compared = compare_parameters(layout.params, reference.params, null_slices, null_bound, initial);
  report.params = std::move(compared.params);
  report.null_slices = std::move(compared.null_slices);
  report.max_param_difference = compared.max_param_difference;
  const bool same_names = compared.same_names;
  const bool null_within = std::all_of(report.null_slices.begin(), report.null_slices.end(),
                                       [](const NullSliceDifference& d) { return d.within(); });
  const NoiseFloor* floor = report.floor ? &*report.floor : nullptr;
  const RoundingFloor* rounding = report.rounding ? &*report.rounding : nullptr;
  if (report.element_bound) {
    for (const ParamDifference& d : report.params) {
      report.element_checks[d.name] =
          element_check(d.name, layout.params, reference.params, *report.element_bound,
                        tensor_tolerance(d, options.param_tolerance, rounding), null_slices);
    }
  }
  report.params_within = same_names && std::all_of(report.params.begin(), report.params.end(), [&](const ParamDifference& d) {
    auto e = report.element_checks.find(d.name);
    return tensor_within(d, options.param_tolerance, floor, rounding) ||
           (e != report.element_checks.end() && e->second.within());
  });
  // bf16 under AdamW: a step's loss also passes within the twins' and the fp32 run's difference at that step, times
  // --noise-multiple x tp_rounding_factor (verify.hpp, loss_floor).
  if (report.adamw && resolved.device.precision == ops::Precision::kBf16 && (report.floor || report.rounding)) {
    report.loss_floor = largest_per_step(report.floor ? report.floor->step_losses : std::vector<double>{},
                                         report.rounding ? report.rounding->step_losses : std::vector<double>{});
    if (!report.loss_floor.empty()) report.loss_floor[0] = 0;  // step 1's loss comes before any update: u / sqrt(N)
    report.loss_floor_factor =
        options.noise_multiple * tp_rounding_factor(resolved.parallel.tensor_model_parallel_size);
  }
  report.losses_within = losses_within(report.layout_losses, report.reference_losses, options.loss_tolerance,
                                       report.loss_floor, report.loss_floor_factor);
  report.passed = report.layout_losses.size() == report.reference_losses.size() && report.losses_within &&
                  report.params_within &&
                  null_within;
  return report;
}

}  // namespace cleave::train
