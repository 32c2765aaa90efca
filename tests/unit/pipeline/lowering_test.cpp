// Lowering: where SEND / RECV / REDUCE_GRAD / OPTIMIZER_STEP go (rule in pipeline/lowering.hpp), checked
// on small schedules whose lowered form is written out in full, plus the structural properties on larger
// ones: receives precede their consumer, sends follow their producer, no transfer inside a rank.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.hpp"
#include "pipeline/dependencies.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/validator.hpp"

namespace cleave::pipeline::lowering_test {
namespace {

std::string rank_line(const Schedule& s, int r) {
  std::string out;
  for (const auto& a : s.ranks[r]) {
    if (!out.empty()) out += ' ';
    out += format_action(a);
  }
  return out;
}

TEST(Lowering, OneFOneBTwoRanksInFull) {
  const Schedule lowered = lower_schedule(one_f_one_b_schedule(2, 3));
  // Rank 1's gradient send and its next receive share a batch with rank 0's matching pair.
  EXPECT_EQ(rank_line(lowered, 0),
            "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1 0RECV_B2 0B2 0REDUCE_GRAD "
            "OPTIMIZER_STEP");
  EXPECT_EQ(rank_line(lowered, 1),
            "1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1RECV_F2 1F2 1B2 1SEND_B2 1REDUCE_GRAD "
            "OPTIMIZER_STEP");
}

TEST(Lowering, SingleRankHasNoCommunication) {
  const Schedule lowered = lower_schedule(interleaved_1f1b_schedule(1, 3, 3));
  for (const auto& a : lowered.ranks[0]) EXPECT_FALSE(is_communication(a.kind)) << format_action(a);
  EXPECT_EQ(lowered.ranks[0].back().kind, ActionKind::kOptimizerStep);
  int reductions = 0;
  for (const auto& a : lowered.ranks[0]) reductions += a.kind == ActionKind::kReduceGrad;
  EXPECT_EQ(reductions, 3);
}

TEST(Lowering, ZeroBubbleVTurnStaysOnTheRank) {
  const int p = 4;
  const Schedule lowered = lower_schedule(zb_v_schedule(p, 8));
  for (const auto& a : lowered.ranks[p - 1]) {
    if (is_communication(a.kind)) {
      // Rank p−1 talks only to rank p−2 (stages p−2 and p+1), never across its own turn p−1 → p.
      const int peer = comm_partner(a).stage;
      EXPECT_TRUE(peer == p - 2 || peer == p + 1) << format_action(a);
    }
  }
  EXPECT_TRUE(validate_schedule(lowered).ok);
}

TEST(Lowering, ReceivesPrecedeConsumersAndSendsFollowProducers) {
  for (auto name : schedule_names()) {
    const Schedule lowered = lower_schedule(make_schedule(name, 4, 9, default_virtual_stages(name)));
    const ActionIndex index(lowered);
    for (int r = 0; r < lowered.pp_size; ++r) {
      for (int i = 0; i < static_cast<int>(lowered.ranks[r].size()); ++i) {
        const Action& a = lowered.ranks[r][i];
        if (is_send(a.kind)) {
          // The send comes after its producer, with only communication in between.
          int k = i - 1;
          while (k >= 0 && is_communication(lowered.ranks[r][k].kind)) --k;
          ASSERT_GE(k, 0) << name << " " << format_action(a);
          const Action& producer = lowered.ranks[r][k];
          EXPECT_EQ(producer.stage, a.stage) << name << " " << format_action(a);
          EXPECT_EQ(producer.microbatch, a.microbatch) << name << " " << format_action(a);
        }
        if (is_recv(a.kind)) {
          const Action consumer = a.kind == ActionKind::kRecvF ? Action{ActionKind::kForward, a.stage, a.microbatch}
                                                                 : Action{ActionKind::kBackward, a.stage, a.microbatch};
          Location where = index.find(consumer);
          if (!where.found()) where = index.find(Action{ActionKind::kBackwardInput, a.stage, a.microbatch});
          ASSERT_TRUE(where.found()) << name << " " << format_action(a);
          EXPECT_EQ(where.rank, r);
          EXPECT_LT(i, where.position) << name << " " << format_action(a);
        }
        if (a.kind == ActionKind::kReduceGrad) {
          // Nothing of the stage's backward follows it.
          for (int k = i + 1; k < static_cast<int>(lowered.ranks[r].size()); ++k) {
            const Action& later = lowered.ranks[r][k];
            EXPECT_FALSE(later.stage == a.stage && is_compute(later.kind)) << name << " " << format_action(later);
          }
        }
      }
    }
  }
}

TEST(Lowering, RejectsInvalidOrAlreadyLoweredInput) {
  const Schedule lowered = lower_schedule(gpipe_schedule(2, 2));
  try {
    lower_schedule(lowered);
    ADD_FAILURE() << "lowered twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is already lowered"), std::string::npos) << e.what();
  }
  const Schedule broken = parse_schedule("rank 0: 0F0 0F1 0B0\nrank 1: 1F0 1B0 1F1 1B1\n", "broken");
  try {
    lower_schedule(broken);
    ADD_FAILURE() << "lowered an invalid schedule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(">>0F1<<"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ensure_lowered(lowered).ranks, lowered.ranks);
}

}  // namespace
}  // namespace cleave::pipeline::lowering_test
