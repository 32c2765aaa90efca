// EventTimeline (pipeline/event_timeline.hpp) on the CPU: spans between marks are host-clock intervals, booked
// in the order added, the first mark pinned to the host clock at begin(); marks taken for a later step reuse the
// pool. (On a GPU the same code measures device time: the executor's trace, tests/gpu/train.)
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "engine/core/error.hpp"
#include "pipeline/event_timeline.hpp"

namespace cleave::testing::event_timeline_test {
namespace {

double host_now_us() {
  using namespace std::chrono;
  return static_cast<double>(duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()) * 1e-3;
}

TEST(EventTimeline, SpansAreTheHostIntervalsBetweenMarksInOrder) {
  ops::Context ctx;
  pipeline::EventTimeline timeline;
  for (int step = 0; step < 2; ++step) {  // the second step reuses the first one's events
    const double before = host_now_us();
    timeline.begin(ctx);
    const int a = timeline.mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int b = timeline.mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const int c = timeline.mark();
    pipeline::Action forward{pipeline::ActionKind::kForward, 0, 1};
    pipeline::Action backward{pipeline::ActionKind::kBackward, 0, 1};
    timeline.add(forward, a, b);
    timeline.add(backward, c, c);  // a zero-length span (a posted batch's later actions)
    std::vector<pipeline::TimedAction> spans = {{}, {}, {}};  // replaced, not appended to
    timeline.finish(spans);
    const double after = host_now_us();
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(pipeline::format_action(spans[0].action), pipeline::format_action(forward));
    EXPECT_EQ(pipeline::format_action(spans[1].action), pipeline::format_action(backward));
    EXPECT_GE(spans[0].start, before);
    EXPECT_GE(spans[0].end - spans[0].start, 5000.0);
    EXPECT_GE(spans[1].start - spans[0].end, 3000.0);
    EXPECT_EQ(spans[1].start, spans[1].end);
    EXPECT_LE(spans[1].end, after);
  }
}

TEST(EventTimeline, MisuseIsRefused) {
  ops::Context ctx;
  pipeline::EventTimeline timeline;
  EXPECT_THROW(timeline.mark(), InternalError);
  std::vector<pipeline::TimedAction> spans;
  EXPECT_THROW(timeline.finish(spans), InternalError);
  timeline.begin(ctx);
  const int a = timeline.mark();
  EXPECT_THROW(timeline.add(pipeline::Action{pipeline::ActionKind::kForward, 0, 0}, a, a + 1), InternalError);  // no mark a+1
}

}  // namespace
}  // namespace cleave::testing::event_timeline_test
