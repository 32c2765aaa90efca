// See verify_compare.hpp.
#include "engine/train/verify_compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "partition/model_spec.hpp"

namespace cleave::train {

double adamw_step_bound(double beta1, double beta2, std::int64_t t) {
  CLEAVE_ASSERT(t >= 1 && beta1 >= 0 && beta1 < 1 && beta2 > 0 && beta2 < 1,
                "adamw_step_bound: step {} (>= 1), betas {} and {} (in [0, 1) and (0, 1))", t, beta1, beta2);
  double sum = 0, term = 1;
  for (std::int64_t j = 0; j < t; ++j, term *= beta1 * beta1 / beta2) sum += term;
  const double td = static_cast<double>(t);
  return (1 - beta1) / (1 - std::pow(beta1, td)) * std::sqrt((1 - std::pow(beta2, td)) / (1 - beta2)) *
         std::sqrt(sum);
}

double adamw_drift_bound(const config::OptimizerConfig& optimizer, std::int64_t steps) {
  const optim::LrSchedule schedule = optim::LrSchedule::from_config(optimizer, steps);
  double drift = 0, step_bound = 0;
  for (std::int64_t s = 0; s < steps; ++s) {
    step_bound = std::max(step_bound, adamw_step_bound(optimizer.betas[0], optimizer.betas[1], s + 1));
    drift += std::abs(schedule.lr_at(s)) * step_bound;
  }
  return 2 * drift;
}

namespace {

// Marks the elements of `name` that the null slices take out of the normalised comparison.
std::vector<bool> null_mask(const std::string& name, std::size_t numel,
                            std::span<const partition::NullGradient> null_slices) {
  std::vector<bool> mask(numel, false);
  for (const partition::NullGradient& n : null_slices) {
    if (n.param != name) continue;
    for (std::int64_t i = n.begin; i < n.end; ++i) mask[static_cast<std::size_t>(i)] = true;
  }
  return mask;
}

// `initial` (empty: none) gives `moved`'s denominator, max |ref - initial|.
ParamDifference difference(const std::string& name, const std::vector<float>& layout, const std::vector<float>& ref,
                           const std::vector<bool>& skip, std::span<const float> initial) {
  ParamDifference d{name, static_cast<std::int64_t>(ref.size())};
  double max_ref = 0, max_moved = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (skip[i]) continue;
    const double diff = std::abs(static_cast<double>(layout[i]) - ref[i]);
    d.max_abs = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(d.max_abs, diff);
    max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
    if (!initial.empty()) max_moved = std::max(max_moved, std::abs(static_cast<double>(ref[i]) - initial[i]));
  }
  d.normalised = d.max_abs == 0 ? 0.0 : d.max_abs / std::max(max_ref, 1e-30);
  if (!initial.empty()) d.moved = d.max_abs == 0 ? 0.0 : d.max_abs / std::max(max_moved, 1e-30);
  return d;
}

}  // namespace

ParamComparison compare_parameters(const ParameterMap& layout, const ParameterMap& reference,
                                   std::span<const partition::NullGradient> null_slices, double null_bound,
                                   const ParameterMap* initial) {
  for (const partition::NullGradient& n : null_slices) {
    auto it = reference.find(n.param);
    CLEAVE_ASSERT(it != reference.end() && 0 <= n.begin && n.begin < n.end &&
                      n.end <= static_cast<std::int64_t>(it->second.size()),
                  "null-gradient slice {}[{}:{}) is not inside a parameter of the reference", n.param, n.begin, n.end);
  }
  if (initial != nullptr) {
    for (const auto& [name, ref] : reference) {
      auto it = initial->find(name);
      CLEAVE_ASSERT(it != initial->end() && it->second.size() == ref.size(),
                    "compare_parameters: the initial values lack {} or hold another size", name);
    }
  }
  ParamComparison out;
  out.same_names = layout.size() == reference.size();
  for (const auto& [name, ref] : reference) {
    auto it = layout.find(name);
    if (it == layout.end() || it->second.size() != ref.size()) {
      out.same_names = false;
      const double inf = std::numeric_limits<double>::infinity();
      out.params.push_back({name, static_cast<std::int64_t>(ref.size()), 0, inf, initial ? inf : 0.0});
    } else {
      const std::span<const float> init = initial ? std::span<const float>(initial->at(name)) : std::span<const float>();
      out.params.push_back(difference(name, it->second, ref, null_mask(name, ref.size(), null_slices), init));
    }
    out.max_param_difference = std::max(out.max_param_difference, out.params.back().normalised);
  }
  for (const partition::NullGradient& n : null_slices) {
    NullSliceDifference d{n, 0, null_bound};
    auto it = layout.find(n.param);
    const std::vector<float>& ref = reference.at(n.param);
    if (it == layout.end() || it->second.size() != ref.size()) {
      d.max_abs = std::numeric_limits<double>::infinity();
    } else {
      for (std::int64_t i = n.begin; i < n.end; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const double diff = std::abs(static_cast<double>(it->second[k]) - ref[k]);
        d.max_abs = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(d.max_abs, diff);
      }
    }
    out.null_slices.push_back(std::move(d));
  }
  return out;
}

std::vector<partition::NullGradient> verify_null_slices(const config::RunConfig& config) {
  if (config.optimizer.type != config::OptimizerType::kAdamw) return {};
  return partition::null_gradients(partition::family(config.model.type).make_spec(config.model));
}

}  // namespace cleave::train
