// See verify.hpp.
#include "engine/train/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::train {
namespace {

struct Run {
  std::vector<double> losses;
  ParameterMap params;
};

Run run(const config::RunConfig& config, comm::Communicator& comm) {
  Trainer trainer(config, comm);
  Run r;
  for (std::int64_t s = 0; s < config.train.steps; ++s) r.losses.push_back(trainer.step(s).loss);
  r.params = trainer.gather_parameters();
  return r;
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

double default_loss_tolerance(const config::RunConfig& config) {
  if (config.device.precision != ops::Precision::kBf16) return 1e-5;
  const double tokens = static_cast<double>(config.resolved_batch().global_batch_size) *
                        static_cast<double>(config::token_seq_len(config.model));
  return std::ldexp(1.0, -8) / std::sqrt(std::max(tokens, 1.0));
}

VerifyReport verify_layout(const config::RunConfig& config, comm::Communicator& world,
                           const VerifyOptions& options) {
  VerifyReport report;
  report.adamw = config.optimizer.type == config::OptimizerType::kAdamw;
  config::RunConfig resolved = config;
  resolved.resolve(world.size());
  const Run layout = run(resolved, world);
  report.layout_losses = layout.losses;
  auto self = world.split(world.rank(), 0, "verify_reference");
  if (world.rank() != 0) return report;
  const Run reference = run(single_rank_reference(resolved), *self);
  report.reference_losses = reference.losses;
  for (std::size_t i = 0; i < layout.losses.size() && i < reference.losses.size(); ++i) {
    const double rel = std::abs(layout.losses[i] - reference.losses[i]) / std::max(std::abs(reference.losses[i]), 1e-12);
    report.max_loss_difference = std::max(report.max_loss_difference, rel);
  }
  const std::vector<partition::NullGradient> null_slices = verify_null_slices(resolved);
  ParamComparison compared = compare_parameters(layout.params, reference.params, null_slices,
                                                adamw_drift_bound(resolved.optimizer, resolved.train.steps));
  report.params = std::move(compared.params);
  report.null_slices = std::move(compared.null_slices);
  report.max_param_difference = compared.max_param_difference;
  const bool same_names = compared.same_names;
  const bool null_within = std::all_of(report.null_slices.begin(), report.null_slices.end(),
                                       [](const NullSliceDifference& d) { return d.within(); });
  report.passed = same_names && report.layout_losses.size() == report.reference_losses.size() &&
                  report.max_loss_difference <= options.loss_tolerance &&
                  report.max_param_difference <= options.param_tolerance && null_within;
  return report;
}

std::string format_report(const VerifyReport& report, const VerifyOptions& options, std::size_t max_rows) {
  std::string out = fmt::format("{:>5}  {:>14}  {:>14}  {:>10}\n", "step", "layout loss", "reference", "rel diff");
  for (std::size_t i = 0; i < report.layout_losses.size() && i < report.reference_losses.size(); ++i) {
    const double a = report.layout_losses[i], b = report.reference_losses[i];
    out += fmt::format("{:>5}  {:>14.8f}  {:>14.8f}  {:>10.3g}\n", i + 1, a, b, std::abs(a - b) / std::abs(b));
  }
  auto params = report.params;
  std::sort(params.begin(), params.end(),
            [](const ParamDifference& a, const ParamDifference& b) { return a.normalised > b.normalised; });
  out += fmt::format("\n{:<40} {:>10} {:>12} {:>12}\n", "parameter (worst first)", "elements", "max |diff|",
                     "normalised");
  for (std::size_t i = 0; i < params.size() && i < max_rows; ++i) {
    out += fmt::format("{:<40} {:>10} {:>12.3g} {:>12.3g}\n", params[i].name, params[i].numel, params[i].max_abs,
                       params[i].normalised);
  }
  if (params.size() > max_rows) out += fmt::format("... {} more parameters\n", params.size() - max_rows);
  out += format_null_slices(report.null_slices, std::min<std::size_t>(max_rows, 4));
  out += fmt::format("\nmax loss difference {:.3g} (tolerance {:.3g}), max parameter difference {:.3g} (tolerance "
                     "{:.3g}): {}\n",
                     report.max_loss_difference, options.loss_tolerance, report.max_param_difference,
                     options.param_tolerance, report.passed ? "PASS" : "FAIL");
  const bool only_params = report.max_loss_difference <= options.loss_tolerance &&
                           report.max_param_difference > options.param_tolerance;
  if (!report.passed && only_params && report.adamw) {
    out += "the losses agree and some parameters do not: with AdamW a parameter whose gradient is near zero (a query "
           "bias in bf16, a rarely routed expert) turns rounding noise into lr-sized steps, so a correct layout can differ "
           "here; check the layout with --set optimizer.type=sgd (docs/multi-rank.md)\n";
  }
  return out;
}

}  // namespace cleave::train
