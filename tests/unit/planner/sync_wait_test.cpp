// The split of a meeting's wait into a part per meeting and a part per second of compute before it
// (engine/planner/sync_wait.hpp, fit_meeting_wait): exact on points on a line, both parts kept >= 0 by the stated
// refits, and refused without two distinct computes.
#include "engine/planner/sync_wait.hpp"

#include <gtest/gtest.h>

#include "engine/core/error.hpp"

namespace cleave::planner::sync_wait_test {
namespace {

TEST(FitMeetingWait, RecoversBothPartsFromPointsOnALine) {
  const double per_meeting = 31e-6, per_compute = 0.075;
  std::vector<MeetingPoint> points;
  for (double c : {5.3e-5, 2.1e-4, 8.5e-4}) points.push_back({c, per_meeting + per_compute * c});
  const MeetingWaitFit f = fit_meeting_wait(points);
  EXPECT_NEAR(f.per_meeting_s, per_meeting, 1e-12);
  EXPECT_NEAR(f.per_compute, per_compute, 1e-9);
}

TEST(FitMeetingWait, KeepsBothPartsNonNegative) {
  // Waits that fall with compute: no part per compute, the mean wait per meeting.
  const MeetingWaitFit falling = fit_meeting_wait({{1e-4, 3e-5}, {4e-4, 2e-5}, {1.6e-3, 1e-5}});
  EXPECT_EQ(falling.per_compute, 0.0);
  EXPECT_NEAR(falling.per_meeting_s, 2e-5, 1e-15);
  // A line through a negative intercept: refitted through the origin, sum(c w) / sum(c^2).
  const std::vector<MeetingPoint> steep = {{1e-4, 0.0}, {4e-4, 6e-5}, {1.6e-3, 3e-4}};
  const MeetingWaitFit f = fit_meeting_wait(steep);
  EXPECT_EQ(f.per_meeting_s, 0.0);
  double cw = 0, cc = 0;
  for (const auto& p : steep) cw += p.compute_s * p.wait_s, cc += p.compute_s * p.compute_s;
  EXPECT_NEAR(f.per_compute, cw / cc, 1e-12);
  EXPECT_GT(f.per_compute, 0.0);
}

TEST(FitMeetingWait, NeedsTwoDistinctComputes) {
  EXPECT_THROW(fit_meeting_wait({{1e-4, 1e-5}}), InternalError);
  EXPECT_THROW(fit_meeting_wait({{1e-4, 1e-5}, {1e-4, 2e-5}}), InternalError);
}

}  // namespace
}  // namespace cleave::planner::sync_wait_test
