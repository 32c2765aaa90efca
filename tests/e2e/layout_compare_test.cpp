// The layout-comparison harness (tests/support/layout_compare.hpp) catches what each bound bounds, on hand-made
// records: bit-exact fails on one flipped bit of one parameter (-0 against 0 included) and on one loss ulp; relative
// and scaled fail just past their bounds and pass just inside; a resumed run that skips a step fails. Built into
// e2e_train_test (the harness's records come from Trainer runs; these need none).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/layout_compare.hpp"

namespace cleave::testing::layout_compare_test {
namespace {

RunRecord record(std::vector<double> losses, std::vector<float> w) {
  RunRecord r;
  r.losses = std::move(losses);
  r.params["w"] = std::move(w);
  return r;
}

TEST(LayoutCompare, BitExactCatchesOneBit) {
  const RunRecord want = record({2.0, 1.5}, {1.0f, 0.0f, -3.0f});
  expect_within(want, want, Bound::bit_exact());
  EXPECT_NONFATAL_FAILURE(expect_within(record({2.0, 1.5}, {1.0f, -0.0f, -3.0f}), want, Bound::bit_exact()),
                          "1 of 3 elements differ");
  EXPECT_NONFATAL_FAILURE(
      expect_within(record({2.0, 1.5}, {std::nextafter(1.0f, 2.0f), 0.0f, -3.0f}), want, Bound::bit_exact()),
      "1 of 3 elements differ");
  EXPECT_NONFATAL_FAILURE(
      expect_within(record({2.0, std::nextafter(1.5, 2.0)}, {1.0f, 0.0f, -3.0f}), want, Bound::bit_exact()), "step 1");
}

TEST(LayoutCompare, RelativeAndScaledHoldTheirBounds) {
  const RunRecord want = record({2.0}, {1.0f, 100.0f});
  const RunRecord got = record({2.0 * (1 + 1e-5)}, {1.0f + 2e-5f, 100.0f});
  const Comparison c = expect_within(got, want, Bound::relative(3e-5));
  EXPECT_NEAR(c.param_diff, 2e-5, 1e-7);
  EXPECT_EQ(c.worst, "w[0]");
  EXPECT_NONFATAL_FAILURE(expect_within(got, want, Bound::relative(1.5e-5)), "worst w[0]");
  // Scaled: |diff| 2e-5 over the tensor's largest magnitude 100.
  EXPECT_NEAR(expect_within(got, want, Bound::scaled(3e-7, 2e-5)).scaled_diff, 2e-7, 1e-9);
  EXPECT_NONFATAL_FAILURE(expect_within(got, want, Bound::scaled(1e-7, 2e-5)), "w");
  EXPECT_NONFATAL_FAILURE(expect_within(got, want, Bound::scaled(1.0, 5e-6)), "loss_diff");
}

TEST(LayoutCompare, AResumedRunMustContinueTheWholeOne) {
  const RunRecord whole = record({3.0, 2.0, 1.0, 0.5}, {1.0f});
  expect_continues_bit_identical(record({1.0, 0.5}, {1.0f}), whole, 2);
  EXPECT_NONFATAL_FAILURE(expect_continues_bit_identical(record({1.0, 0.25}, {1.0f}), whole, 2), "step 4");
  EXPECT_NONFATAL_FAILURE(expect_continues_bit_identical(record({1.0}, {1.0f}), whole, 2), "Expected equality");
  EXPECT_NONFATAL_FAILURE(expect_continues_bit_identical(record({1.0, 0.5}, {2.0f}), whole, 2), "1 of 1 elements");
  EXPECT_LE(expect_losses_within(record({1.0, 0.5}, {}), record({1.0, 0.5 * (1 + 1e-6)}, {}), 1e-5), 1e-5);
  EXPECT_NONFATAL_FAILURE(expect_losses_within(record({1.0}, {}), record({1.1}, {}), 1e-5), "step 0");
}

}  // namespace
}  // namespace cleave::testing::layout_compare_test
