// See verify_adamw_bound.hpp.
#include "engine/train/verify_adamw_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/optim/lr_schedule.hpp"

namespace cleave::train {
namespace {

// Elements of `name` that the null slices take out of the comparison (held to the drift bound instead).
std::vector<bool> skipped(const std::string& name, std::size_t numel, std::span<const partition::NullGradient> nulls) {
  std::vector<bool> skip(numel, false);
  for (const partition::NullGradient& n : nulls) {
    if (n.param != name) continue;
    for (std::int64_t i = n.begin; i < n.end && i < static_cast<std::int64_t>(numel); ++i) {
      skip[static_cast<std::size_t>(i)] = true;
    }
  }
  return skip;
}

}  // namespace

void add_adamw_sensitivity(ParameterMap& sensitivity, const ParameterMap& exp_avg_sq,
                           const config::OptimizerConfig& optimizer, std::int64_t steps, std::int64_t step) {
  const optim::LrSchedule schedule = optim::LrSchedule::from_config(optimizer, steps);
  const double lr = std::abs(schedule.lr_at(step));
  const auto t = step + 1;  // the update's 1-based number
  const double beta2 = optimizer.betas[1];
  const double correction = 1 - std::pow(beta2, static_cast<double>(t));
  const double gain = lr * (1 + adamw_step_bound(optimizer.betas[0], beta2, t) * std::sqrt(static_cast<double>(t)));
  for (const auto& [name, v] : exp_avg_sq) {
    std::vector<float>& s = sensitivity[name];
    if (s.empty()) s.assign(v.size(), 0.0f);
    CLEAVE_ASSERT(s.size() == v.size(), "add_adamw_sensitivity: {} holds {} values, its state {}", name, s.size(),
                  v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double denominator = std::sqrt(std::max(0.0, static_cast<double>(v[i])) / correction) + optimizer.eps;
      s[i] = static_cast<float>(std::min<double>(s[i] + gain / denominator, std::numeric_limits<float>::max()));
    }
  }
}

std::map<std::string, double> gradient_noise(std::span<const std::pair<const ParameterMap*, const ParameterMap*>> pairs,
                                             const ParameterMap& sensitivity,
                                             std::span<const partition::NullGradient> null_slices) {
  std::map<std::string, double> noise;
  for (const auto& [a, b] : pairs) {
    for (const auto& [name, values] : *a) {
      auto other = b->find(name);
      auto s = sensitivity.find(name);
      if (other == b->end() || s == sensitivity.end() || other->second.size() != values.size() ||
          s->second.size() != values.size()) {
        continue;
      }
      double& sigma = noise[name];
      const std::vector<bool> skip = skipped(name, values.size(), null_slices);
      for (std::size_t i = 0; i < values.size() && !std::isnan(sigma); ++i) {
        if (skip[i]) continue;
        const double diff = std::abs(static_cast<double>(values[i]) - other->second[i]);
        if (std::isnan(diff)) {
          sigma = std::nan("");
        } else if (diff > 0) {
          sigma = std::max(sigma, s->second[i] > 0 ? diff / s->second[i] : std::numeric_limits<double>::infinity());
        }
      }
    }
  }
  return noise;
}

double ElementBound::allowed(const std::string& name, std::size_t i, double tensor_tolerance) const {
  auto sigma = noise.find(name);
  auto s = sensitivity.find(name);
  if (sigma == noise.end() || s == sensitivity.end() || i >= s->second.size() || !(sigma->second > 0)) {
    return tensor_tolerance;
  }
  // σ infinite (the twins moved an element AdamW never stepped): no bound from this rule beyond the cap.
  const double element = std::isinf(sigma->second) ? cap : std::min(cap, factor * sigma->second * s->second[i]);
  return std::max(tensor_tolerance, element);
}

ElementCheck element_check(const std::string& name, const ParameterMap& layout, const ParameterMap& reference,
                           const ElementBound& bound, double tensor_tolerance,
                           std::span<const partition::NullGradient> null_slices) {
  ElementCheck c;
  c.name = name;
  auto l = layout.find(name);
  auto r = reference.find(name);
  if (l == layout.end() || r == reference.end() || l->second.size() != r->second.size()) {
    c.ratio = std::numeric_limits<double>::infinity();
    return c;
  }
  const std::vector<bool> skip = skipped(name, r->second.size(), null_slices);
  for (std::size_t i = 0; i < r->second.size(); ++i) {
    if (skip[i]) continue;
    const double diff = std::abs(static_cast<double>(l->second[i]) - r->second[i]);
    const double allowed = bound.allowed(name, i, tensor_tolerance);
    const double ratio = std::isnan(diff) ? std::nan("")
                         : diff == 0      ? 0.0
                                          : diff / std::max(allowed, 1e-300);
    if (std::isnan(ratio) || ratio > c.ratio) {
      c.ratio = ratio;
      c.worst = static_cast<std::int64_t>(i);
      c.difference = diff;
      c.allowed = allowed;
      if (std::isnan(ratio)) break;
    }
  }
  return c;
}

}  // namespace cleave::train
