// Point-to-point posting order (p2p_posting.hpp): the executor's blocks and early receives as a list, and the
// pairing rule NCCL needs (both ends of every rank pair post that pair's messages in the same order) proved for
// every schedule generator at p in {2, 3, 4} and several micro-batch counts, lowered for training and as the
// forward-only evaluation schedule; a schedule that breaks the rule is refused naming the pair and actions.
#include "pipeline/p2p_posting.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "pipeline/forward_only.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/validator.hpp"

namespace cleave::pipeline::p2p_posting_test {
namespace {

std::vector<Action> actions_of(const std::string& tokens) {
  std::vector<Action> actions;
  std::istringstream in(tokens);
  for (std::string token; in >> token;) actions.push_back(parse_action(token));
  return actions;
}

TEST(P2PPosting, BlocksPostTheirOwnActionsThenTheNextBlocksReceives) {
  // 0: 1RECV_F0 | 1: 1F0 | 2: 1SEND_F0 3: 1RECV_F1 4: 1RECV_B0 | 5: 1F1 | 6: 1RECV_B1 7: 1SEND_F1 | 8: 1B0
  const auto actions = actions_of("1RECV_F0 1F0 1SEND_F0 1RECV_F1 1RECV_B0 1F1 1RECV_B1 1SEND_F1 1B0");
  const auto blocks = p2p_blocks(actions);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].first, 0u);
  EXPECT_EQ(blocks[0].end, 1u);
  EXPECT_EQ(blocks[0].posted, (std::vector<std::size_t>{0}));  // the first block's receives are its own
  EXPECT_EQ(blocks[0].next_receives, (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(blocks[1].posted, (std::vector<std::size_t>{2}));
  EXPECT_EQ(blocks[1].posted_early, (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(blocks[1].next_receives, (std::vector<std::size_t>{6}));
  EXPECT_EQ(blocks[2].posted, (std::vector<std::size_t>{7}));
  EXPECT_EQ(blocks[2].posted_early, (std::vector<std::size_t>{6}));
  EXPECT_TRUE(blocks[2].next_receives.empty());
  EXPECT_EQ(p2p_posting_order(actions), (std::vector<std::size_t>{0, 3, 4, 2, 6, 7}));
}

// Every generator, lowered, and its forward-only twin: no pair posts out of order.
TEST(P2PPosting, EveryGeneratedScheduleAgreesOnEveryPair) {
  int checked = 0;
  for (const std::string_view name : schedule_names()) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, 2, 3, 4, 5, 8, 9, 16}) {
        if (m < schedule_min_microbatches(name, p)) continue;
        for (int v : {default_virtual_stages(name), 3}) {
          if (v == 3 && name != "interleaved_1f1b") continue;
          const Schedule compute = make_schedule(name, p, m, v);
          const Schedule lowered = lower_schedule(compute);
          for (const Schedule* s : {&lowered}) {
            const auto violations = p2p_order_violations(*s);
            EXPECT_TRUE(violations.empty()) << name << " p" << p << " m" << m << " v" << v << ": "
                                            << violations.front().describe(*s);
          }
          const Schedule eval = forward_only_schedule(lowered);
          const auto eval_violations = p2p_order_violations(eval);
          EXPECT_TRUE(eval_violations.empty()) << "forward-only " << name << " p" << p << " m" << m << ": "
                                               << eval_violations.front().describe(eval);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(P2PPosting, ReceivesInAnotherOrderThanTheSendsAreRefused) {
  // Rank 0 sends micro-batch 0 then 1 in one batch; rank 1 receives 1 then 0. MPI would match them by tag;
  // NCCL would put micro-batch 0's activation into micro-batch 1's buffer.
  const Schedule s = parse_schedule(
      "rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0RECV_B1 0B0 0B1 0REDUCE_GRAD OPTIMIZER_STEP\n"
      "rank 1: 1RECV_F1 1RECV_F0 1F0 1B0 1F1 1B1 1SEND_B0 1SEND_B1 1REDUCE_GRAD OPTIMIZER_STEP\n");
  const auto violations = p2p_order_violations(s);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].sender, 0);
  EXPECT_EQ(violations[0].receiver, 1);
  EXPECT_EQ(violations[0].index, 0);
  const ValidationResult result = validate_schedule(s);
  ASSERT_FALSE(result.ok);
  EXPECT_NE(result.reason.find("point-to-point order between rank 0 and rank 1: the #1 message rank 0 posts to "
                               "rank 1 is 0SEND_F0, but the #1 receive rank 1 posts from rank 0 is 1RECV_F1"),
            std::string::npos)
      << result.reason;
  EXPECT_NE(result.grid.find(">>0SEND_F0<<"), std::string::npos) << result.grid;
  EXPECT_NE(result.grid.find(">>1RECV_F1<<"), std::string::npos) << result.grid;
}

TEST(P2PPosting, BackwardMessagesCountInTheSamePairStream) {
  // Rank 1 sends its input gradient for micro-batch 0 back; rank 0's receives are in order: accepted. The same
  // schedule with rank 0 listing the two backward receives swapped is refused on the pair (1, 0).
  const std::string good =
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD OPTIMIZER_STEP\n"
      "rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1REDUCE_GRAD OPTIMIZER_STEP\n";
  EXPECT_TRUE(p2p_order_violations(parse_schedule(good)).empty());
  const Schedule bad = parse_schedule(
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0RECV_B0 0B0 0B1 0REDUCE_GRAD OPTIMIZER_STEP\n"
      "rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1REDUCE_GRAD OPTIMIZER_STEP\n");
  const auto violations = p2p_order_violations(bad);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].sender, 1);
  EXPECT_EQ(violations[0].receiver, 0);
  EXPECT_NE(violations[0].describe(bad).find("is 1SEND_B0, but the #1 receive rank 0 posts from rank 1 is 0RECV_B1"),
            std::string::npos)
      << violations[0].describe(bad);
}

}  // namespace
}  // namespace cleave::pipeline::p2p_posting_test
