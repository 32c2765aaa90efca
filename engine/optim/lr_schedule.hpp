// Learning-rate schedule: linear warm-up from 0, then cosine, linear or no decay to min_lr. A pure function
// of the step, so every rank computes the same value without communicating.
//
// For 0-based step s, base lr L, floor m, warm-up w and total steps N:
//   s < w:   L * (s + 1) / w                      (the first update already moves; step w - 1 reaches L)
//   s ≥ w:   p = min(1, (s - w) / max(1, N - w))
//            cosine:   m + (L - m) * (1 + cos(π p)) / 2
//            linear:   L - (L - m) * p
//            constant: L
#pragma once

#include <cstdint>

#include "engine/config/config.hpp"

namespace cleave::optim {

using LrDecay = config::LrScheduleType;  // optimizer.schedule

struct LrSchedule {
  double lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  LrDecay decay = LrDecay::kCosine;

  double lr_at(std::int64_t step) const;

  // optimizer.{lr, min_lr, warmup_steps, schedule} with train.steps as the decay horizon.
  static LrSchedule from_config(const config::OptimizerConfig& optimizer, std::int64_t total_steps);
};

}  // namespace cleave::optim
