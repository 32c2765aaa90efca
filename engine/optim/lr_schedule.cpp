// LR schedule formulas (see lr_schedule.hpp).
#include "engine/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/core/error.hpp"

namespace cleave::optim {

double LrSchedule::lr_at(std::int64_t step) const {
  CLEAVE_ASSERT(step >= 0, "lr_at({})", step);
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == LrDecay::kConstant) return lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  if (decay == LrDecay::kLinear) return lr - (lr - min_lr) * progress;
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

LrSchedule LrSchedule::from_config(const config::OptimizerConfig& optimizer, std::int64_t total_steps) {
  LrSchedule s;
  s.lr = optimizer.lr;
  s.min_lr = optimizer.min_lr;
  s.warmup_steps = optimizer.warmup_steps;
  s.total_steps = total_steps;
  s.decay = optimizer.schedule;
  return s;
}

}  // namespace cleave::optim
