// Validator: broken schedules are rejected with a one-line reason and the step × rank grid in which the
// offending action is marked >>like this<<; every generated schedule (compute and lowered) passes
// (generators_test.cpp). Broken schedules are written in the text form so each case reads as a pipeline.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/validator.hpp"

namespace cleave::pipeline::validator_test {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Validates and expects a rejection whose reason and grid contain the given pieces.
ValidationResult expect_invalid(const Schedule& s, const std::string& reason_part,
                                const std::vector<std::string>& marked) {
  const ValidationResult result = validate_schedule(s);
  EXPECT_FALSE(result.ok);
  EXPECT_TRUE(contains(result.reason, reason_part)) << "reason: " << result.reason;
  for (const auto& token : marked) {
    EXPECT_TRUE(contains(result.grid, ">>" + token + "<<")) << "missing mark on " << token << " in\n" << result.grid;
  }
  EXPECT_EQ(result.reason.find('\n'), std::string::npos) << "the reason is one line";
  const std::string message = result.message(s.name);
  EXPECT_EQ(message.rfind("schedule '" + s.name + "' is invalid: " + result.reason + "\n", 0), 0u) << message;
  EXPECT_TRUE(contains(message, "  step  rank 0")) << message;
  return result;
}

// Replaces the first occurrence of `from` (a whole token) in `text`.
std::string replace_token(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(" " + from + " ");
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at + 1, from.size(), to);
}

std::string remove_token(const std::string& text, const std::string& token) {
  std::string out = text;
  const auto at = out.find(" " + token + " ");
  EXPECT_NE(at, std::string::npos) << token;
  return out.erase(at, token.size() + 1);
}

TEST(Validator, AcceptsAHandWrittenSchedule) {
  const Schedule s = parse_schedule(
      "rank 0: 0F0 0F1 0B0 0B1\n"
      "rank 1: 1F0 1B0 1F1 1B1\n");
  const ValidationResult result = validate_schedule(s);
  EXPECT_TRUE(result.ok) << result.message(s.name);
  EXPECT_TRUE(result.grid.empty());
  EXPECT_EQ(result.run.num_steps, 6);  // 0F0 | 0F1 1F0 | 1B0 | 0B0 1F1 | 1B1 | 0B1
  EXPECT_NO_THROW(check_schedule(s));
}

TEST(Validator, RejectsMissingReceive) {
  const std::string text = format_schedule(lower_schedule(one_f_one_b_schedule(3, 4)));
  const Schedule broken = parse_schedule(remove_token(text, "1RECV_F2"), "missing_recv");
  expect_invalid(broken, "1F2 on rank 1 needs 0F2 from rank 0, but rank 1 has no 1RECV_F2 before it", {"1F2"});
  try {
    check_schedule(broken);
    ADD_FAILURE() << "check_schedule accepted a schedule without 1RECV_F2";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), ">>1F2<<")) << e.what();
  }
}

TEST(Validator, RejectsMissingSendAndReceiveAfterTheConsumer) {
  const std::string text = format_schedule(lower_schedule(one_f_one_b_schedule(2, 2)));
  expect_invalid(parse_schedule(remove_token(text, "1SEND_B1"), "missing_send"), "but rank 1 has no 1SEND_B1 after it",
                 {"1B1"});
  // Move 1RECV_F1 behind the forward that needs it.
  const std::string late = replace_token(remove_token(text, "1RECV_F1"), "1F1", "1F1 1RECV_F1");
  expect_invalid(parse_schedule(late, "late_recv"), "1RECV_F1 on rank 1 comes after 1F1", {"1F1", "1RECV_F1"});
}

TEST(Validator, RejectsSwappedForwardAndBackward) {
  const Schedule s = parse_schedule(
      "rank 0: 0F0 0F1 0B0 0B1\n"
      "rank 1: 1B0 1F0 1F1 1B1\n",
      "swapped");
  expect_invalid(s, "1B0 on rank 1 comes before 1F0, which it needs", {"1B0", "1F0"});
}

TEST(Validator, RejectsWeightGradientBeforeInputGradient) {
  const Schedule s = parse_schedule("rank 0: 0F0 0W0 0I0\n", "w_first");
  expect_invalid(s, "0W0 on rank 0 comes before 0I0", {"0W0"});
}

TEST(Validator, RejectsDuplicateMicrobatch) {
  // 0F1 written as a second 0F0.
  const Schedule s = parse_schedule(
      "num_microbatches: 2\n"
      "rank 0: 0F0 0F0 0B0 0B1\n"
      "rank 1: 1F0 1B0 1F1 1B1\n",
      "duplicate");
  expect_invalid(s, "duplicate action 0F0 (rank 0, position 1): it already appears at rank 0, position 0",
                 {"0F0"});
}

TEST(Validator, RejectsMissingAndMixedBackwards) {
  expect_invalid(parse_schedule("num_microbatches: 2\nrank 0: 0F0 0F1 0B0\n", "no_b1"),
                 "stage 0 micro-batch 1 has no backward (expected 0B1, or 0I1 and 0W1)", {"0F1"});
  expect_invalid(parse_schedule("rank 0: 0F0 0I0\n", "no_w"), "stage 0 micro-batch 0 has 0I0 but no 0W0", {"0I0"});
  expect_invalid(parse_schedule("rank 0: 0F0 0I0 0W0 0B0\n", "both"), "has both a fused backward 0B0 and a split one",
                 {"0B0", "0I0", "0W0"});
  expect_invalid(parse_schedule("num_microbatches: 2\nrank 0: 0F0 0B0 0B1\n", "no_f1"),
                 "stage 0 micro-batch 1 has no forward (0F1 is missing)", {"0B1"});
}

TEST(Validator, RejectsActionsOnTheWrongRankOrOutOfRange) {
  expect_invalid(parse_schedule("placement: 0 1\nrank 0: 0F0 1F0 0B0 1B0\nrank 1:\n", "wrong_rank"),
                 "1F0 is listed on rank 0 but stage 1 is placed on rank 1", {"1F0"});
  expect_invalid(parse_schedule("num_microbatches: 1\nnum_stages: 1\nrank 0: 0F0 0B0 0F1\n", "range"),
                 "micro-batch 1 is out of range (the schedule has micro-batches 0..0)", {"0F1"});
}

TEST(Validator, RejectsACrossRankDeadlock) {
  // Rank 0 waits for 1B0 before it sends micro-batch 1; rank 1 wants micro-batch 1 first.
  const Schedule s = parse_schedule(
      "rank 0: 0F0 0B0 0F1 0B1\n"
      "rank 1: 1F1 1B1 1F0 1B0\n",
      "deadlock");
  const auto result = expect_invalid(s, "deadlock in the dry run after 1 step: rank 0 waits at 0B0 for 1I0 or 1B0 "
                                        "(rank 1, not run yet); rank 1 waits at 1F1 for 0F1 (rank 0, not run yet)",
                                     {"0B0", "1F1"});
  EXPECT_TRUE(contains(result.grid, "never ran in the dry run")) << result.grid;
}

TEST(Validator, RejectsSendsThatBlockEachOtherUnderRendezvous) {
  // Valid with buffered sends, but each rank's send sits in a batch of its own ahead of the receive the
  // other rank's send needs: rank 0 blocks in 0SEND_F1 until rank 1 posts 1RECV_F1, which rank 1 only
  // does after 1SEND_B0, which waits for rank 0's 0RECV_B0.
  const Schedule s = parse_schedule(
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0RECV_B0 0I0 0W0 0RECV_B1 0I1 0W1 0RECV_B2 0I2 0W2 "
      "0REDUCE_GRAD OPTIMIZER_STEP\n"
      "rank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1W0 1RECV_F1 1F1 1I1 1SEND_B1 1W1 1RECV_F2 1F2 1I2 1SEND_B2 1W2 "
      "1REDUCE_GRAD OPTIMIZER_STEP\n",
      "rendezvous");
  expect_invalid(s, "rank 0 waits at 0SEND_F1 for 1RECV_F1 on rank 1 to be posted", {"0SEND_F1", "1SEND_B0"});
}

TEST(Validator, RejectsTransfersInsideOneRank) {
  // ZB-V keeps the turn p−1 → p on rank p−1; a send there is wrong.
  const std::string text = format_schedule(lower_schedule(zb_v_schedule(2, 3)));
  const Schedule s = parse_schedule(replace_token(text, "1F0", "1F0 1SEND_F0"), "turn");
  expect_invalid(s, "1SEND_F0 on rank 1: stages 1 and 2 are both on rank 1, so no transfer is needed", {"1SEND_F0"});
}

TEST(Validator, RejectsMisplacedReductionAndOptimizerStep) {
  const std::string text = format_schedule(lower_schedule(gpipe_schedule(2, 2)));
  const std::string early_reduce = replace_token(remove_token(text, "0REDUCE_GRAD"), "0B1", "0REDUCE_GRAD 0B1");
  expect_invalid(parse_schedule(early_reduce, "early_reduce"),
                 "0REDUCE_GRAD on rank 0 comes before 0B1 (rank 0, position", {"0REDUCE_GRAD", "0B1"});
  expect_invalid(parse_schedule(remove_token(text, "1REDUCE_GRAD"), "no_reduce"), "stage 1 has no 1REDUCE_GRAD",
                 {"1B1"});
  const std::string early_step = replace_token(text, "0F1", "OPTIMIZER_STEP 0F1");
  expect_invalid(parse_schedule(early_step, "early_step"), "rank 0 has more than one OPTIMIZER_STEP",
                 {"OPTIMIZER_STEP"});
}

TEST(Validator, LongGridsShowTheRowsAroundTheMark) {
  const std::string text = format_schedule(lower_schedule(one_f_one_b_schedule(4, 32)));
  const Schedule broken = parse_schedule(remove_token(text, "2RECV_F20"), "long");
  const auto result = expect_invalid(broken, "no 2RECV_F20 before it", {"2F20"});
  EXPECT_TRUE(contains(result.grid, "not shown")) << result.grid;
  EXPECT_LT(std::count(result.grid.begin(), result.grid.end(), '\n'), 40);
}

}  // namespace
}  // namespace cleave::pipeline::validator_test
