// The router log's timed all-to-alls (layers/moe/router_log.hpp) and their split into the wait for the last peer
// and the exchange's own time (engine/train/router_metrics.hpp, split_all_to_alls), by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/train/router_metrics.hpp"
#include "layers/layer.hpp"
#include "layers/moe/router_log.hpp"

namespace cleave::train::router_metrics_split_test {
namespace {

using layers::AllToAllCall;
using layers::AllToAllKind;

std::size_t at(AllToAllKind k) { return static_cast<std::size_t>(k); }

TEST(RouterLogCalls, KeepsEachTimedAllToAllInOrderUntilCleared) {
  layers::RouterLog log;
  log.add_all_to_all_time("b0", AllToAllKind::kCountExchange, 1e-5);
  log.add_all_to_all_time("b0", AllToAllKind::kDispatch, 2e-5);
  log.add_all_to_all_time("b1", AllToAllKind::kCombine, 4e-5);
  ASSERT_EQ(log.calls().size(), 3u);
  EXPECT_EQ(log.calls()[1].kind, AllToAllKind::kDispatch);
  EXPECT_EQ(log.calls()[2].seconds, 4e-5);
  EXPECT_DOUBLE_EQ(log.find("b0")->all_to_all_s, 3e-5);
  log.clear();
  EXPECT_TRUE(log.calls().empty());
  EXPECT_EQ(log.find("b0"), nullptr);
  EXPECT_EQ(layers::all_to_all_kind_name(AllToAllKind::kCombineGrad), "combine_grad");
}

// clear() keeps the blocks' records (so a step after the first allocates none) but a record nothing touched since
// reads as absent, and one touched again starts from zero: what a fresh log would hold.
TEST(RouterLogCalls, ClearedRecordsAreKeptButReadAsNewOnes) {
  layers::RouterLog log;
  layers::Param bias;
  log.add("b0", std::vector<std::int64_t>{3, 1, 4}, 0.5, 0.25);
  log.add_dispatch("b0", std::vector<std::int64_t>{2, 2}, std::vector<std::int64_t>{1, 3}, 10);
  log.note_bias("b0", &bias, 0.01);
  log.add("b1", std::vector<std::int64_t>{1, 1, 1}, 0.1, 0.0);
  log.clear();
  EXPECT_EQ(log.find("b0"), nullptr);
  EXPECT_EQ(log.find("b1"), nullptr);
  log.add("b1", std::vector<std::int64_t>{2, 0, 5}, 0.125, 0.0);
  EXPECT_EQ(log.find("b0"), nullptr);  // kept, not touched this step
  const layers::BlockRouting* b1 = log.find("b1");
  ASSERT_NE(b1, nullptr);
  EXPECT_EQ(b1->counts, (std::vector<std::int64_t>{2, 0, 5}));
  EXPECT_EQ(b1->aux_loss, 0.125);
  EXPECT_EQ(b1->micro_batches, 1);
  log.add_all_to_all_time("b0", AllToAllKind::kDispatch, 1e-3);
  const layers::BlockRouting* b0 = log.find("b0");
  ASSERT_NE(b0, nullptr);
  EXPECT_TRUE(b0->counts.empty());
  EXPECT_TRUE(b0->sent_rows.empty() && b0->sent_bytes.empty() && b0->received_rows.empty());
  EXPECT_EQ(b0->bias, nullptr);
  EXPECT_EQ(b0->bias_update_rate, 0.0);
  EXPECT_EQ(b0->micro_batches, 0);
  EXPECT_EQ(b0->aux_loss, 0.0);
  EXPECT_EQ(b0->all_to_all_s, 1e-3);
}

// Per call: the rank's time less the group's shortest in that call is its wait; a call where this rank was the
// shortest waits nothing; kinds are summed apart.
TEST(RouterLogCalls, SplitsEachCallIntoTheWaitForTheLastPeerAndTheRest) {
  const std::vector<AllToAllCall> calls = {{AllToAllKind::kCountExchange, 10e-6}, {AllToAllKind::kDispatch, 5e-6},
                                           {AllToAllKind::kCombine, 30e-6}, {AllToAllKind::kCountExchange, 20e-6},
                                           {AllToAllKind::kCombineGrad, 7e-6}};
  const std::vector<double> shortest = {4e-6, 5e-6, 10e-6, 20e-6, 7e-6};
  const AllToAllSplit s = split_all_to_alls(calls, shortest);
  EXPECT_NEAR(s.seconds[at(AllToAllKind::kCountExchange)], 30e-6, 1e-18);
  EXPECT_NEAR(s.wait[at(AllToAllKind::kCountExchange)], 6e-6, 1e-18);
  EXPECT_NEAR(s.seconds[at(AllToAllKind::kDispatch)], 5e-6, 1e-18);
  EXPECT_EQ(s.wait[at(AllToAllKind::kDispatch)], 0.0);
  EXPECT_NEAR(s.wait[at(AllToAllKind::kCombine)], 20e-6, 1e-18);
  EXPECT_EQ(s.seconds[at(AllToAllKind::kDispatchGrad)], 0.0);
  EXPECT_EQ(s.wait[at(AllToAllKind::kCombineGrad)], 0.0);
  // Without a group (each call's shortest its own time) nothing is a wait.
  std::vector<double> own;
  for (const auto& c : calls) own.push_back(c.seconds);
  const AllToAllSplit alone = split_all_to_alls(calls, own);
  for (double w : alone.wait) EXPECT_EQ(w, 0.0);
  EXPECT_THROW(split_all_to_alls(calls, {1e-6}), Error);
}

}  // namespace
}  // namespace cleave::train::router_metrics_split_test
