// LR schedule: warm-up, cosine / linear / constant decay against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "engine/optim/lr_schedule.hpp"

namespace cleave::optim::lr_schedule_test {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{0.3, 0.03, 4, 14, LrDecay::kCosine};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.3 * 1 / 4);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.3 * 2 / 4);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 0.3);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.3);  // decay starts at the peak
  // step 9: progress (9 - 4) / 10 = 0.5 -> halfway between 0.3 and 0.03.
  EXPECT_NEAR(s.lr_at(9), 0.165, 1e-15);
  // step 6: progress 0.2 -> 0.03 + 0.27 * (1 + cos(0.2 π)) / 2.
  EXPECT_NEAR(s.lr_at(6), 0.03 + 0.27 * (1 + std::cos(0.2 * std::numbers::pi)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(14), 0.03);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 0.03);
  for (int t = 5; t < 14; ++t) EXPECT_LT(s.lr_at(t), s.lr_at(t - 1));
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin{1.0, 0.2, 0, 8, LrDecay::kLinear};
  EXPECT_DOUBLE_EQ(lin.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(lin.lr_at(2), 1.0 - 0.8 * 0.25);
  EXPECT_DOUBLE_EQ(lin.lr_at(8), 0.2);
  LrSchedule constant{0.5, 0.0, 2, 8, LrDecay::kConstant};
  EXPECT_DOUBLE_EQ(constant.lr_at(0), 0.25);
  EXPECT_DOUBLE_EQ(constant.lr_at(1), 0.5);
  EXPECT_DOUBLE_EQ(constant.lr_at(7), 0.5);
}

TEST(LrSchedule, FromConfig) {
  config::OptimizerConfig c;
  c.lr = 0.02;
  c.min_lr = 0.001;
  c.warmup_steps = 3;
  c.schedule = config::LrScheduleType::kLinear;
  const LrSchedule s = LrSchedule::from_config(c, 13);
  EXPECT_EQ(s.decay, LrDecay::kLinear);
  EXPECT_EQ(s.total_steps, 13);
  EXPECT_DOUBLE_EQ(s.lr_at(8), 0.02 - 0.019 * 0.5);
}

}  // namespace
}  // namespace cleave::optim::lr_schedule_test
