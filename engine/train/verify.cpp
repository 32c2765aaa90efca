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

// The null-gradient slices' lines (none under SGD): why they are not in the table, and their bound.
std::string format_null_slices(const std::vector<NullSliceDifference>& slices, std::size_t max_rows) {
  if (slices.empty()) return "";
  std::string out = fmt::format(
      "\nheld to AdamW's bound instead (gradient zero in exact arithmetic: AdamW turns its rounding noise into steps "
      "up to lr; any two AdamW runs differ there by at most 2 x sum of lr x Adam's step bound, {:.3g}):\n",
      slices.front().bound);
  auto sorted = slices;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const NullSliceDifference& a, const NullSliceDifference& b) { return a.max_abs > b.max_abs; });
  for (std::size_t i = 0; i < sorted.size() && i < max_rows; ++i) {
    const NullSliceDifference& d = sorted[i];
    out += fmt::format("{:<40} [{}, {}) max |diff| {:.3g}: {} ({})\n", d.slice.param, d.slice.begin, d.slice.end,
                       d.max_abs, d.within() ? "within" : "BEYOND the bound", d.slice.reason);
  }
  if (sorted.size() > max_rows) out += fmt::format("... {} more slices\n", sorted.size() - max_rows);
  return out;
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

namespace {

// How close a tensor is to failing: its difference over the tolerance it is held to (tensor_within's rule).
double closeness(const ParamDifference& d, const VerifyOptions& options, const VerifyReport& report) {
  double c = d.normalised / std::max(options.param_tolerance, 1e-300);
  if (report.floor) c = std::min(c, d.moved / std::max(report.floor->tolerance(), 1e-300));
  if (report.rounding) c = std::min(c, d.max_abs / std::max(report.rounding->tolerance(d.name), 1e-300));
  auto e = report.element_checks.find(d.name);
  if (e != report.element_checks.end()) c = std::min(c, e->second.ratio);
  return c;
}

// The precision twin's lines: what it is, the factor, the tensor closest to its tolerance.
std::string format_rounding(const RoundingFloor& r, const std::vector<ParamDifference>& params) {
  // A tensor the fp32 run ends exactly on the reference has no finite ratio: name it with its difference instead of
  // dividing by zero (which printed 1e+297 x).
  double worst = 0, unbounded = 0;
  std::string name = "-", unbounded_name;
  for (const ParamDifference& d : params) {
    const double twin = r.max_abs.count(d.name) ? r.max_abs.at(d.name) : 0.0;
    if (d.max_abs <= 0) continue;
    if (twin <= 0) {
      if (d.max_abs > unbounded) unbounded = d.max_abs, unbounded_name = d.name;
    } else if (d.max_abs / twin > worst) {
      worst = d.max_abs / twin, name = d.name;
    }
  }
  const std::string largest =
      unbounded_name.empty()
          ? fmt::format("{:.3g} x ({})", worst, name)
          : fmt::format("unbounded ({} ends {:.3g} from the reference, where the {} ends on it exactly)",
                        unbounded_name, unbounded, r.order ? "order twins" : "fp32 run");
  if (r.order) {
    return fmt::format(
        "fp32 AdamW order floor per tensor: the reference run again with {} (the same sums in another order; "
        "AdamW turns the rounding of a near-zero gradient into a step up to lr) ends each tensor this far from it "
        "(\"vs order twin\", the largest over every pair among the reference and the twins); a tensor also passes "
        "within {:.3g} x that (--noise-multiple x sqrt((tp + 2) / 2) at tp > 1): the layout's largest is {}; the "
        "twins' losses differ by up to {:.3g}\n",
        r.twin, r.factor, largest, r.loss);
  }
  return fmt::format(
      "bf16 rounding per tensor: the reference run again with {} ends each tensor as far from it as bf16's roundings "
      "move it (\"vs fp32\"); a tensor also passes within {:.3g} x that (--noise-multiple x sqrt((tp + 2) / 2) at tp > "
      "1): the layout's largest is {}; the fp32 run's losses differ by up to {:.3g}\n",
      r.twin, r.factor, largest, r.loss);
}

// The twins' lines: what they are, each pair's largest, the floor, the tolerance a tensor gets from it.
std::string format_floor(const NoiseFloor& f, const std::vector<ParamDifference>& params) {
  const auto worst = std::max_element(params.begin(), params.end(), [](const ParamDifference& a,
                                                                       const ParamDifference& b) { return a.moved < b.moved; });
  std::string twins;
  for (std::size_t k = 0; k < f.twins.size(); ++k) {
    twins += fmt::format("{}{} (twin {})", k == 0 ? "" : k + 1 == f.twins.size() ? " and with " : ", with ", f.twins[k],
                         k + 1);
  }
  std::string pairs;
  for (const FloorPair& p : f.pairs) {
    pairs += fmt::format("{}{} {:.3g} ({})", pairs.empty() ? "" : ", ", p.runs, p.largest,
                         p.worst.empty() ? "-" : p.worst);
  }
  return fmt::format(
      "\nbf16 noise floor: the reference run again with {} (the same sums in other orders before the same bf16 "
      "roundings); the runs of each pair end apart by at most these fractions of a tensor's movement: {}; the floor is "
      "their largest, {:.3g}{}; a tensor passes within --param-tolerance of its scale or within {:g} x {:.3g} x that "
      "(--noise-multiple x sqrt((tp + 2) / 2) at tp > 1), {:.3g}, of its movement: the layout's largest is {:.3g} "
      "({}); the twins' losses differ by up to {:.3g}\n",
      twins, pairs, f.floor,
      f.flip > 0 ? fmt::format(", and no less than one sign flip of AdamW's first update (2 lr_1 / sum of lr), {:.3g}",
                               f.flip)
                 : std::string(),
      f.multiple, f.tp_factor, f.tolerance(), worst == params.end() ? 0.0 : worst->moved,
      worst == params.end() ? "-" : worst->name, f.loss);
}

// Why a run whose routing diverged is not compared further, and what checks it.
std::string format_routing(const RoutingDivergence& d) {
  const std::string counts = fmt::format("tokens per expert, summed over the blocks: layout {}, reference {}",
                                         fmt::join(d.layout, " "), fmt::join(d.reference, " "));
  if (d.near_tie()) {
    return fmt::format(
        "routing diverged at step {} on a near-tie: {} token(s) went to another expert than one rank sent them to "
        "({}). A router's choice is discrete: the layout's roundings moved a score across a near-tie, which no bound "
        "on rounding covers; from there the two runs train different experts on different tokens (and a sigmoid "
        "router's bias moves by its sign rule), so the differences above are not a mismatch of the layout's "
        "arithmetic, nor proof of it. Verdict: not shown either way; check the arithmetic with the routing fixed "
        "(model.forced_routing uniform keeps every router score, loss and sum, and chooses the experts by a fixed "
        "rule), as the command below does\n",
        d.step, d.moved, counts);
  }
  return fmt::format(
      "routing diverged at step {}: {} tokens went to other experts than one rank sent them to ({}), more than a "
      "near-tie tips ({} at most): a routing error (the router's scores or bias, the dispatch), or an error elsewhere "
      "that moved the scores first; the run with the routing fixed (the command below) checks the rest of the "
      "arithmetic\n",
      d.step, d.moved, counts, RoutingDivergence::kNearTieTokens);
}

// bf16 AdamW's loss floor line: what it is, the step closest to its bound.
std::string format_loss_floor(const VerifyReport& report, const VerifyOptions& options) {
  const std::vector<double> d = loss_differences(report.layout_losses, report.reference_losses);
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double floor = i < report.loss_floor.size() ? report.loss_floor[i] * report.loss_floor_factor : 0.0;
    const double ratio = d[i] / std::max({options.loss_tolerance, floor, 1e-300});
    if (!(ratio <= worst)) worst = ratio, at = i;
  }
  return fmt::format(
      "bf16 AdamW loss floor: after a step AdamW's normalised update turns bf16's roundings of near-zero gradients "
      "into lr-sized steps, and the loss follows the weights: a step's loss (from step 2) also passes within {:.3g} x "
      "the largest relative difference of the twins' and the fp32 run's loss from the reference's at that step "
      "(--noise-multiple x sqrt((tp + 2) / 2)); the closest is step {} at {:.3g} of its bound ({:.3g} against the "
      "twins' {:.3g})\n",
      report.loss_floor_factor, at + 1, worst, at < d.size() ? d[at] : 0.0,
      at < report.loss_floor.size() ? report.loss_floor[at] : 0.0);
}

// The per-element bound's line: what it is, how many tensors pass on it alone, the tensor closest to it.
std::string format_element(const VerifyReport& report, const VerifyOptions& options) {
  const ElementCheck* closest = nullptr;
  std::vector<std::string> only;  // the tensors that pass on this bound alone, with their ratio
  for (const ParamDifference& d : report.params) {
    auto e = report.element_checks.find(d.name);
    if (e == report.element_checks.end()) continue;
    const RoundingFloor* rounding = report.rounding ? &*report.rounding : nullptr;
    if (!tensor_within(d, options.param_tolerance, nullptr, rounding) && e->second.within()) {
      only.push_back(fmt::format("{} ({:.3g} of its bound)", d.name, e->second.ratio));
    }
    if (closest == nullptr || !(e->second.ratio <= closest->ratio)) closest = &e->second;
  }
  const ElementBound& b = *report.element_bound;
  return fmt::format(
      "fp32 AdamW per element: the order twins' differences show each tensor's gradient-order noise s, and the "
      "reference's own AdamW state how far such noise moves each element, s x sum over steps of lr (1 + B sqrt(t)) / "
      "(sqrt(v) + eps) (a near-zero gradient: up to a step per step; a large one: s / |g| of one); an element also "
      "passes within {:.3g} x that, at most {:.3g} (2 x sum of lr x Adam's step bound): {} tensor(s) pass on this "
      "alone{}; the closest is {}\n",
      b.factor, b.cap, only.size(),
      only.empty() ? std::string() : fmt::format(", {}", fmt::join(only.begin(), only.begin() + std::min<std::size_t>(only.size(), 4), ", ")),
      closest == nullptr ? std::string("-")
                         : fmt::format("{} at {:.3g} of its bound (element {}: {:.3g} against {:.3g})", closest->name,
                                       closest->ratio, closest->worst, closest->difference, closest->allowed));
}

}  // namespace

std::string format_report(const VerifyReport& report, const VerifyOptions& options, std::size_t max_rows) {
  std::string out = fmt::format("{:>5}  {:>14}  {:>14}  {:>10}\n", "step", "layout loss", "reference", "rel diff");
  for (std::size_t i = 0; i < report.layout_losses.size() && i < report.reference_losses.size(); ++i) {
    const double a = report.layout_losses[i], b = report.reference_losses[i];
    out += fmt::format("{:>5}  {:>14.8f}  {:>14.8f}  {:>10.3g}\n", i + 1, a, b, std::abs(a - b) / std::abs(b));
  }
  auto params = report.params;
  std::stable_sort(params.begin(), params.end(), [&](const ParamDifference& a, const ParamDifference& b) {
    return closeness(a, options, report) > closeness(b, options, report);
  });
  out += fmt::format("\n{:<40} {:>10} {:>12} {:>12}{}{}{}\n", "parameter (worst first)", "elements", "max |diff|",
                     "normalised", report.floor ? fmt::format(" {:>12}", "of movement") : "",
                     report.rounding ? fmt::format(" {:>12}", report.rounding->order ? "vs order twin" : "vs fp32")
                                     : "",
                     report.element_bound ? fmt::format(" {:>12}", "of elem bound") : "");
  for (std::size_t i = 0; i < params.size() && i < max_rows; ++i) {
    const ParamDifference& d = params[i];
    const auto fp32 = report.rounding ? report.rounding->max_abs.find(d.name) : std::map<std::string, double>::const_iterator();
    const auto element = report.element_checks.find(d.name);
    out += fmt::format("{:<40} {:>10} {:>12.3g} {:>12.3g}{}{}{}\n", d.name, d.numel, d.max_abs, d.normalised,
                       report.floor ? fmt::format(" {:>12.3g}", d.moved) : "",
                       report.rounding ? fmt::format(" {:>12.3g}", fp32 == report.rounding->max_abs.end() ? 0.0 : fp32->second)
                                       : "",
                       element != report.element_checks.end() ? fmt::format(" {:>12.3g}", element->second.ratio) : "");
  }
  if (params.size() > max_rows) out += fmt::format("... {} more parameters\n", params.size() - max_rows);
  out += format_null_slices(report.null_slices, std::min<std::size_t>(max_rows, 4));
  if (report.floor) out += format_floor(*report.floor, report.params);
  if (report.rounding) out += (report.floor ? "" : "\n") + format_rounding(*report.rounding, report.params);
  if (report.element_bound) out += format_element(report, options);
  if (!report.loss_floor.empty()) out += format_loss_floor(report, options);
  out += fmt::format("\nmax loss difference {:.3g} (tolerance {:.3g}{}), max parameter difference {:.3g} (tolerance "
                     "{:.3g}{}): {}\n",
                     report.max_loss_difference, options.loss_tolerance,
                     report.loss_floor.empty() ? std::string() : std::string(", or the twins' at that step x ") +
                                                                     fmt::format("{:.3g}", report.loss_floor_factor),
                     report.max_param_difference,
                     options.param_tolerance,
                     (report.floor ? fmt::format(", or the bf16 floor's {:.3g} of movement", report.floor->tolerance())
                                   : std::string()) +
                         (report.rounding ? fmt::format(", or {:.3g} x vs {}", report.rounding->factor,
                                                     report.rounding->order ? "order twin" : "fp32")
                                         : std::string()) +
                         (report.element_bound ? std::string(", or AdamW's per-element bound") : std::string()),
                     report.passed                                              ? "PASS"
                     : report.routing_diverged && report.routing_diverged->near_tie() ? "FAIL (routing diverged on a near-tie: not a parameter mismatch)"
                     : report.routing_diverged                                    ? "FAIL (routing diverged)"
                                                                                  : "FAIL");
  if (!report.passed && report.routing_diverged) return out + format_routing(*report.routing_diverged);
  const bool only_params =
      (report.losses_within || report.max_loss_difference <= options.loss_tolerance) && !report.params_within;
  if (!report.passed && only_params && (report.floor || report.rounding)) {
    // A router's choice is discrete: a score the layout's roundings move across a near-tie sends a token to another
    // expert, which no reordering of the reference need do (benchmarks/verify/RESULTS-2026-12-01-h-layout-sweep.md).
    const std::string routed =
        report.routed && !report.routing_compared ? "; or a router near-tie that the layout's roundings tip, sending a token to another expert (and "
                        "moving a sigmoid router's selection bias by its sign rule): check that with --set "
                        "model.forced_routing=uniform, which fixes the experts and keeps the arithmetic"
                      : "";
    out += "the losses agree and some parameters do not, by more than the same run differs from itself with its sums in "
           "another order: not rounding (a wrong gradient or update on those tensors), unless the layout rounds more "
           "often than the reference" + routed + "; compare with --set " +
           (report.adamw ? "optimizer.type=sgd" : "device.precision=fp32") + " (docs/multi-rank.md)\n";
  } else if (!report.passed && only_params && report.adamw) {
    out += "the losses agree and some parameters do not: with AdamW a parameter whose gradient is near zero (a query "
           "bias in bf16, a rarely routed expert) turns rounding noise into lr-sized steps, so a correct layout can differ "
           "here; check the layout with --set optimizer.type=sgd (docs/multi-rank.md)\n";
  }
  return out;
}

}  // namespace cleave::train
