// Action tokens and the schedule text form: every token kind round-trips, every generator's schedule
// (compute and lowered) survives save → load unchanged, headers can be inferred, and bad input names the
// source, line and token.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "support/error_of.hpp"

namespace cleave::pipeline::schedule_text_test {
namespace {

using cleave::testing::error_of;

void expect_same(const Schedule& a, const Schedule& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.pp_size, b.pp_size);
  EXPECT_EQ(a.num_stages, b.num_stages);
  EXPECT_EQ(a.num_microbatches, b.num_microbatches);
  EXPECT_EQ(a.virtual_stages, b.virtual_stages);
  EXPECT_EQ(a.stage_to_rank, b.stage_to_rank);
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.overlap_fb_pairs, b.overlap_fb_pairs);
}

TEST(ActionText, EveryKindRoundTrips) {
  const Action actions[] = {
      {ActionKind::kForward, 2, 5},     {ActionKind::kBackwardInput, 0, 11}, {ActionKind::kBackwardWeight, 7, 0},
      {ActionKind::kBackward, 13, 130}, {ActionKind::kSendF, 1, 3},          {ActionKind::kRecvF, 2, 3},
      {ActionKind::kSendB, 2, 9},       {ActionKind::kRecvB, 1, 9},          {ActionKind::kReduceGrad, 4, -1},
      {ActionKind::kOptimizerStep, -1, -1}};
  const char* tokens[] = {"2F5",     "0I11",     "7W0",     "13B130",        "1SEND_F3",
                          "2RECV_F3", "2SEND_B9", "1RECV_B9", "4REDUCE_GRAD", "OPTIMIZER_STEP"};
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(format_action(actions[k]), tokens[k]);
    EXPECT_EQ(parse_action(tokens[k]), actions[k]) << tokens[k];
  }
}

TEST(ActionText, BadTokensSayWhatIsWrong) {
  EXPECT_NE(error_of([] { parse_action("2Q5"); }).find("bad action token '2Q5': unknown action kind 'Q'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_action("F5"); }).find("F needs a stage number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_action("2F"); }).find("needs a micro-batch number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_action("2F5x"); }).find("'5x' is not a micro-batch number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_action("3OPTIMIZER_STEP"); }).find("takes no stage number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_action("3REDUCE_GRAD1"); }).find("takes no micro-batch number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_action("2send_f5"); }).find("unknown action kind ''"), std::string::npos);
}

TEST(ScheduleText, EveryGeneratorRoundTripsThroughAFile) {
  const auto dir = std::filesystem::temp_directory_path() / "cleave_schedule_text_test";
  std::filesystem::create_directories(dir);
  for (auto name : schedule_names()) {
    for (int p : {1, 3, 4}) {
      for (int m_wanted : {1, 5, 8}) {
        const int m = std::max(m_wanted, schedule_min_microbatches(name, p));  // dualpipev needs m >= 2p
        SCOPED_TRACE(::testing::Message() << name << " p=" << p << " m=" << m);
        const int v = default_virtual_stages(name);
        const Schedule compute = make_schedule(name, p, m, v);
        const Schedule lowered = lower_schedule(compute);
        const std::string path = (dir / (std::string(name) + ".txt")).string();
        save_schedule(compute, path);
        expect_same(load_schedule(path), compute);
        save_schedule(lowered, path);
        expect_same(load_schedule(path), lowered);
        expect_same(parse_schedule(format_schedule(lowered)), lowered);
      }
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ScheduleText, InfersTheHeaderFromTheRankLines) {
  // Comments, blank lines and a V-shaped placement given only by where the stages appear.
  const Schedule s = parse_schedule(
      "# two ranks, two chunks each, V placement\n"
      "\n"
      "rank 1: 1F0 2F0 2B0 1B0   # the turn stays on rank 1\n"
      "rank 0: 0F0 3F0 3B0 0B0\n",
      "v.txt");
  EXPECT_EQ(s.name, "v.txt");
  EXPECT_EQ(s.pp_size, 2);
  EXPECT_EQ(s.num_stages, 4);
  EXPECT_EQ(s.num_microbatches, 1);
  EXPECT_EQ(s.virtual_stages, 2);
  EXPECT_EQ(s.stage_to_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(s.ranks[1][1], (Action{ActionKind::kForward, 2, 0}));
}

TEST(ScheduleText, ErrorsNameSourceLineAndToken) {
  auto parse = [](const char* text) { return error_of([text] { parse_schedule(text, "my.sched"); }); };
  EXPECT_NE(parse("rank 0: 0F0\nrank 1: 1F0 1Z0 1B0\n").find("schedule file 'my.sched' line 2, token 2 ('1Z0'): "
                                                              "unknown action kind 'Z'"),
            std::string::npos);
  EXPECT_NE(parse("pp_size: 2\nrank 0: 0F0 0B0\n").find("pp_size is 2 but there are 1 rank lines"), std::string::npos);
  EXPECT_NE(parse("stages: 2\nrank 0: 0F0\n").find("line 1: unknown key 'stages'"), std::string::npos);
  EXPECT_NE(parse("rank 0: 0F0\nrank 0: 0B0\n").find("line 2: rank 0 already has a line (line 1)"), std::string::npos);
  EXPECT_NE(parse("rank 0: 0F0 1F0\nrank 1: 1B0\n").find("stage 1 appears on rank 0 (line 1) and rank 1 (line 2)"),
            std::string::npos);
  EXPECT_NE(parse("rank 0: 0F0 2F0\nrank 1: 3F0\n").find("stage 1 appears on no rank"), std::string::npos);
  EXPECT_NE(parse("rank 0: 0F0 1F0 2F0\nrank 1:\n").find("3 stages cannot be spread evenly over 2 ranks"),
            std::string::npos);
  // A header that promises more stages than the file places does not allocate a billion of them.
  EXPECT_NE(parse("num_stages: 1000000000\nrank 0: 0F0 0B0\n").find("stage 1 appears on no rank"), std::string::npos);
  // Nor does a stage number in an action (fuzz: tests/fuzz/corpus/schedule_text/regress-stage-999999999-oom).
  EXPECT_NE(parse("rank 0: 0F0 0B0\nrank 1: 1F0 999999999W0\n").find("stage 2 appears on no rank"),
            std::string::npos);
  // pp_size × virtual_stages beyond an int is a message, not an overflow.
  EXPECT_NE(parse("virtual_stages: 2147483647\nplacement: 0 1\nrank 0: 0F0 0B0\nrank 1: 1F0 1B0\n")
                .find("2 stages is not pp_size 2 × virtual stages 2147483647 = 4294967294"),
            std::string::npos);
  EXPECT_NE(parse("num_microbatches: zero\nrank 0: 0F0\n").find("line 1: num_microbatches must be an integer >= 1"),
            std::string::npos);
  EXPECT_NE(parse("just words\n").find("line 1: expected 'rank N: actions...' or 'key: value'"), std::string::npos);
  EXPECT_NE(parse("placement: 0 0\nrank 0: 0F0\nrank 1: 1F0\n").find("schedule 'my.sched': rank 0 holds 2 stages but every rank must hold virtual_stages = 1"), std::string::npos);
  EXPECT_NE(error_of([] { load_schedule("/nonexistent/cleave.sched"); }).find("cannot open schedule file "
                                                                               "'/nonexistent/cleave.sched'"),
            std::string::npos);
}

// parallel.moe_a2a_overlap's schedule property survives save -> load: DualPipeV's overlapped pairs (adjacent,
// flag set) come back with the flag and the same pairs; a plain schedule's text has no such line; a compute-only
// file with the flag gets its pairs made adjacent again once lowered (as make_plan and `cleave simulate` do).
TEST(ScheduleText, OverlappedPairsRoundTrip) {
  for (int p : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "dualpipev p=" << p);
    const Schedule compute = make_schedule("dualpipev", p, 2 * p, default_virtual_stages("dualpipev"));
    const Schedule paired = overlap_fb_pairs(lower_schedule(compute));
    ASSERT_GT(count_overlapped_pairs(paired), 0);
    const std::string text = format_schedule(paired);
    EXPECT_NE(text.find("\noverlap_fb_pairs: true\n"), std::string::npos) << text;
    const Schedule loaded = parse_schedule(text);
    expect_same(loaded, paired);
    EXPECT_EQ(count_overlapped_pairs(loaded), count_overlapped_pairs(paired));
    const auto path = std::filesystem::temp_directory_path() / "cleave_schedule_text_overlap.txt";
    save_schedule(paired, path.string());
    const Schedule from_file = load_schedule(path.string());
    std::filesystem::remove(path);
    EXPECT_TRUE(from_file.overlap_fb_pairs);
    EXPECT_EQ(from_file.ranks, paired.ranks);

    EXPECT_EQ(format_schedule(lower_schedule(compute)).find("overlap_fb_pairs"), std::string::npos);
    EXPECT_FALSE(parse_schedule(format_schedule(compute)).overlap_fb_pairs);

    Schedule flagged_compute = compute;  // as if hand-written: compute actions and the flag
    flagged_compute.overlap_fb_pairs = true;
    const Schedule reloaded = parse_schedule(format_schedule(flagged_compute));
    EXPECT_TRUE(reloaded.overlap_fb_pairs);
    EXPECT_EQ(overlap_fb_pairs(ensure_lowered(reloaded)).ranks, paired.ranks);
  }
  const std::string bad = error_of([] { parse_schedule("overlap_fb_pairs: yes\nrank 0: 0F0 0B0\n", "x.txt"); });
  EXPECT_NE(bad.find("schedule file 'x.txt' line 1: overlap_fb_pairs must be 'true' or 'false', got 'yes'"),
            std::string::npos)
      << bad;
}

}  // namespace
}  // namespace cleave::pipeline::schedule_text_test
