// OverlapPair (pipeline/overlap_pair.hpp): the baton between the two sides of an overlapped F&B pair. Checked with a
// log of what each side does: the hand-over order at wait points is the fixed ping-pong the header states (so every
// rank of an ep group posts its collectives in the same order), never two sides at once, a side that finished keeps
// no one waiting, an exception in either side finishes the other and is rethrown, and a wait outside a pair is a
// plain wait.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/overlap_pair.hpp"

namespace cleave::pipeline::overlap_pair_test {
namespace {

// A Work that notes its wait in the log.
class LoggedWork final : public comm::Work {
 public:
  LoggedWork(std::vector<std::string>& log, std::string name) : log_(log), name_(std::move(name)) {}
  bool test() override { return true; }
  void wait() override { log_.push_back("wait " + name_); }

 private:
  std::vector<std::string>& log_;
  std::string name_;
};

struct Running {
  std::atomic<int> now{0};
  std::atomic<int> most{0};
  void enter() {
    const int n = ++now;
    int m = most.load();
    while (n > m && !most.compare_exchange_weak(m, n)) {
    }
  }
  void leave() { --now; }
};

TEST(OverlapPair, HandsTheRankOverAtEachWaitInAFixedOrder) {
  OverlapPair pair(Device::cpu());
  std::vector<std::string> log;
  Running running;
  // F: post a, compute, post b, compute. B: post x, compute, post y, post z, compute.
  const auto side = [&](const std::string& name, const std::vector<std::string>& posts) {
    return [&, name, posts] {
      for (const std::string& p : posts) {
        running.enter();
        log.push_back(name + " computes, posts " + p);
        running.leave();
        LoggedWork work(log, p);
        pair.wait(work);
      }
      running.enter();
      log.push_back(name + " ends");
      running.leave();
    };
  };
  const PairTimes times = pair.run(side("F", {"a", "b"}), side("B", {"x", "y", "z"}));
  const std::vector<std::string> want = {
      "F computes, posts a", "B computes, posts x", "wait a", "F computes, posts b", "wait x",
      "B computes, posts y", "wait b",              "F ends", "wait y",             "B computes, posts z",
      "wait z",              "B ends"};
  EXPECT_EQ(log, want);
  EXPECT_EQ(running.most.load(), 1) << "both sides ran at once";
  EXPECT_EQ(times.hand_overs, 4);  // at a, x, b, y; at z F is done and B keeps the rank
  EXPECT_GE(times.first_seconds, 0.0);
  EXPECT_GE(times.second_seconds, 0.0);

  // The pair runs again (the partner thread is reused) with the same order.
  log.clear();
  pair.run(side("F", {"a", "b"}), side("B", {"x", "y", "z"}));
  EXPECT_EQ(log, want);
}

TEST(OverlapPair, ASideWithoutWaitsRunsWholeAndAnExceptionIsRethrownAfterTheOtherEnds) {
  OverlapPair pair(Device::cpu());
  std::vector<std::string> log;
  pair.run([&] { log.push_back("F"); }, [&] {
    LoggedWork work(log, "x");
    pair.wait(work);  // F is done: a plain wait
    log.push_back("B");
  });
  EXPECT_EQ(log, (std::vector<std::string>{"F", "wait x", "B"}));

  log.clear();
  EXPECT_THROW(pair.run(
                   [&] {
                     LoggedWork work(log, "a");
                     pair.wait(work);
                     throw std::runtime_error("F failed");
                   },
                   [&] {
                     LoggedWork work(log, "x");
                     pair.wait(work);
                     log.push_back("B ends");
                   }),
               std::runtime_error);
  EXPECT_EQ(log, (std::vector<std::string>{"wait a", "wait x", "B ends"}));

  log.clear();
  try {
    pair.run([&] { log.push_back("F ends"); }, [&]() { throw std::logic_error("B failed"); });
    ADD_FAILURE() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "B failed");
  }
  EXPECT_EQ(log, (std::vector<std::string>{"F ends"}));
}

TEST(OverlapPair, AWaitOutsideAPairIsAPlainWaitAndCountsNoHandOff) {
  OverlapPair pair(Device::cpu());
  std::vector<std::string> log;
  LoggedWork work(log, "w");
  pair.wait(work);
  EXPECT_EQ(log, (std::vector<std::string>{"wait w"}));
  EXPECT_EQ(pair.seconds_handed_off(), 0.0);
  double during = -1;
  pair.run(
      [&] {
        LoggedWork a(log, "a");
        pair.wait(a);
        during = pair.seconds_handed_off();  // F's own clock: the time B held the rank
      },
      [&] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  EXPECT_GE(during, 0.015);
}

}  // namespace
}  // namespace cleave::pipeline::overlap_pair_test
