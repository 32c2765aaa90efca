// A measured step term by term (engine/planner/measured_step.hpp), from recorded synthetic timelines (no clock is
// read, nothing is timed): each span lands in its kind's row, idle before a peer's tensor splits at the peer's
// SEND into bubble and point_to_point, every other idle is bubble, the rows sum to the makespan; a fused B makes one
// backward row; the Chrome trace the trainer writes reads back to the same step; the comparison names the
// planner's terms inside each row and the row furthest from its prediction; a span's measured waits on collectives
// (tp, cp, zero_gather, expert_all_to_all) leave its row for rows of their own beside the planner's same terms (the
// count exchange with the expert all-to-all's, the transfers' waits with point_to_point); the predicted terms by kind
// of action (StepBreakdown::by_action) sum to the busy terms for every plan a search ranks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/error.hpp"
#include "engine/planner/measured_step.hpp"
#include "engine/planner/plan_search.hpp"
#include "pipeline/trace.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::measured_step_test {
namespace {

using pipeline::ActionKind;
using A = StepAction;
using T = StepTerm;

pipeline::TimedAction span(ActionKind kind, int stage, int microbatch, double start, double end) {
  return {{kind, stage, microbatch}, start, end, {}};
}

// Two pp ranks, times in ms. Rank 0 (stage 0) runs F0 F1, waits for stage 1's input gradient (sent at 3.5 ms),
// then I0 W0 and the optimizer step; rank 1 (stage 1) waits for F0 (sent at 1.0 ms), runs F0, a fused B0, sends,
// reduces its gradients and waits (locally) for its optimizer step, which ends the step at 6.0 ms.
pipeline::Timeline two_ranks() {
  pipeline::Timeline t;
  t.ranks.resize(2);
  t.ranks[0] = {span(ActionKind::kForward, 0, 0, 0.0, 1.0),        span(ActionKind::kSendF, 0, 0, 1.0, 1.1),
                span(ActionKind::kForward, 0, 1, 1.1, 2.1),        span(ActionKind::kSendF, 0, 1, 2.1, 2.2),
                span(ActionKind::kRecvB, 0, 0, 2.2, 2.25),         span(ActionKind::kBackwardInput, 0, 0, 4.0, 5.0),
                span(ActionKind::kBackwardWeight, 0, 0, 5.0, 5.5), span(ActionKind::kOptimizerStep, -1, -1, 5.5, 5.7)};
  t.ranks[1] = {span(ActionKind::kRecvF, 1, 0, 0.0, 0.05),    span(ActionKind::kForward, 1, 0, 1.5, 2.5),
                span(ActionKind::kBackward, 1, 0, 2.5, 3.5),  span(ActionKind::kSendB, 1, 0, 3.5, 3.6),
                span(ActionKind::kReduceGrad, 1, -1, 3.6, 3.8), span(ActionKind::kOptimizerStep, -1, -1, 5.8, 6.0)};
  return t;
}

TEST(MeasuredStep, SpansLandInTheirRowsAndIdleSplitsAtThePeersSend) {
  const MeasuredStep m = measure_step(two_ranks(), 0);
  EXPECT_EQ(m.rank, 0);
  EXPECT_FALSE(m.fused_backward);
  EXPECT_NEAR(m[A::kForward], 2.0e-3, 1e-12);
  EXPECT_NEAR(m[A::kInputGrad], 1.0e-3, 1e-12);
  EXPECT_NEAR(m[A::kWeightGrad], 0.5e-3, 1e-12);
  EXPECT_NEAR(m[A::kReduceGrad], 0.0, 1e-12);
  EXPECT_NEAR(m[A::kOptimizer], 0.2e-3, 1e-12);
  // Posting the sends and the receive (0.25 ms) and, of the wait 2.25-4.0 ms, the time after stage 1 sent (0.5 ms).
  EXPECT_NEAR(m.point_to_point_s, 0.75e-3, 1e-12);
  // The wait before stage 1 sent (1.25 ms) and the tail after the optimizer step until rank 1 ends (0.3 ms).
  EXPECT_NEAR(m.bubble_s, 1.55e-3, 1e-12);
  EXPECT_NEAR(m.step_s, 6.0e-3, 1e-12);
  EXPECT_NEAR(m.total(), m.step_s, 1e-12);
}

TEST(MeasuredStep, AFusedBackwardIsOneRowAndLocalWaitsAreBubble) {
  const MeasuredStep m = measure_step(two_ranks(), 1);
  EXPECT_TRUE(m.fused_backward);
  EXPECT_NEAR(m[A::kForward], 1.0e-3, 1e-12);
  EXPECT_NEAR(m[A::kInputGrad], 1.0e-3, 1e-12);  // the B
  EXPECT_NEAR(m[A::kWeightGrad], 0.0, 1e-12);
  EXPECT_NEAR(m[A::kReduceGrad], 0.2e-3, 1e-12);
  EXPECT_NEAR(m.point_to_point_s, (0.05 + 0.5 + 0.1) * 1e-3, 1e-12);  // posts, and the wait after stage 0 sent F0
  EXPECT_NEAR(m.bubble_s, (0.95 + 2.0) * 1e-3, 1e-12);  // before stage 0 sent; before the (local) optimizer step
  EXPECT_NEAR(m.total(), 6.0e-3, 1e-12);
  // A peer's tensor the rank never received (no RECV on the rank: a V schedule's local hand-over) is no transfer.
  pipeline::Timeline local = two_ranks();
  local.ranks[1].erase(local.ranks[1].begin());
  const MeasuredStep l = measure_step(local, 1);
  EXPECT_NEAR(l.point_to_point_s, 0.1e-3, 1e-12);
  EXPECT_NEAR(l.total(), 6.0e-3, 1e-12);
}

TEST(MeasuredStep, TheTrainersChromeTraceReadsBackToTheSameStep) {
  pipeline::TraceOptions options;  // as engine/train/measured_trace.cpp writes it: ms, 1000 µs each
  options.unit = "ms";
  options.microseconds_per_unit = 1000.0;
  const std::string json = pipeline::chrome_trace_json(two_ranks(), options);
  const pipeline::Timeline back = read_chrome_trace(json, "trace.json");
  ASSERT_EQ(back.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const MeasuredStep a = measure_step(two_ranks(), r), b = measure_step(back, r);
    for (std::size_t k = 0; k < a.actions.size(); ++k) EXPECT_NEAR(a.actions[k], b.actions[k], 1e-9);
    EXPECT_NEAR(a.point_to_point_s, b.point_to_point_s, 1e-9);
    EXPECT_NEAR(a.bubble_s, b.bubble_s, 1e-9);
    EXPECT_NEAR(a.step_s, b.step_s, 1e-9);
    EXPECT_EQ(a.fused_backward, b.fused_backward);
  }
}

TEST(MeasuredStep, BadInputIsRefusedByName) {
  EXPECT_THROW(measure_step(two_ranks(), 2), Error);
  try {
    read_chrome_trace("{}", "runs/x/trace.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs/x/trace.json"), std::string::npos) << e.what();
  }
  const std::string unknown = R"({"traceEvents": [{"ph": "X", "pid": 0, "cat": "Q", "ts": 0, "dur": 1}]})";
  EXPECT_THROW(read_chrome_trace(unknown, "t.json"), Error);
}

TEST(MeasuredStep, TheMedianIsTakenPerRow) {
  MeasuredStep a, b, c;
  a.actions[0] = 1, b.actions[0] = 3, c.actions[0] = 2;
  a.bubble_s = 5, b.bubble_s = 4, c.bubble_s = 6;
  c.fused_backward = true;
  const MeasuredStep m = median_step({a, b, c});
  EXPECT_EQ(m.actions[0], 2);
  EXPECT_EQ(m.bubble_s, 5);
  EXPECT_TRUE(m.fused_backward);
  EXPECT_EQ(median_step({}).step_s, 0);
}

// A prediction for rank 0 from the terms of its F, I, W and optimizer actions: the step's terms are their sums,
// plus 0.2 ms of point-to-point and 1.3 ms of bubble.
StepBreakdown predicted(const ActionTerms& f, const ActionTerms& i, const ActionTerms& w, const ActionTerms& o) {
  StepBreakdown b;
  b.add_action(A::kForward, f), b.add_action(A::kInputGrad, i), b.add_action(A::kWeightGrad, w);
  b.add_action(A::kOptimizer, o);
  for (const auto& terms : b.by_action) {
    for (std::size_t t = 0; t < terms.size(); ++t) b.seconds[t] += terms[t];
  }
  b.seconds[static_cast<std::size_t>(T::kPointToPoint)] = 0.2e-3;
  b.seconds[static_cast<std::size_t>(T::kBubble)] = 1.3e-3;
  return b;
}

// A prediction for rank 0 of two_ranks(): F holds forward and a tp all-reduce.
StepBreakdown predicted_rank0() {
  ActionTerms f, i, w, o;
  f[T::kForward] = 1.5e-3, f[T::kTensorParallel] = 0.3e-3;
  i[T::kInputGrad] = 0.9e-3;
  w[T::kWeightGrad] = 0.5e-3;
  o[T::kOptimizer] = 0.2e-3;
  return predicted(f, i, w, o);
}

TEST(MeasuredStep, TheComparisonNamesTheTermsInEachRowAndTheLargestDisagreement) {
  const std::vector<TermRow> rows = compare_step(predicted_rank0(), measure_step(two_ranks(), 0));
  std::vector<std::string> names;
  for (const auto& r : rows) names.push_back(r.name);
  // REDUCE_GRAD: neither predicted nor measured, left out.
  EXPECT_EQ(names, (std::vector<std::string>{"forward (F)", "input_grad (I)", "weight_grad (W)",
                                             "optimizer (OPTIMIZER_STEP)", "point_to_point", "bubble", "total"}));
  EXPECT_EQ(rows[0].predicted_terms, "forward 1.500 + tensor_parallel 0.300");
  EXPECT_NEAR(rows[0].predicted_s, 1.8e-3, 1e-12);
  EXPECT_NEAR(rows[0].measured_s, 2.0e-3, 1e-12);
  EXPECT_NEAR(rows.back().predicted_s, 4.9e-3, 1e-12);
  EXPECT_NEAR(rows.back().measured_s, 6.0e-3, 1e-12);
  const TermRow* worst = largest_disagreement(rows);
  ASSERT_NE(worst, nullptr);
  EXPECT_EQ(worst->name, "point_to_point");  // 0.55 ms apart; bubble 0.25, forward 0.2
  const std::vector<std::string> table = comparison_table(rows);
  ASSERT_EQ(table.size(), rows.size() + 2);
  EXPECT_NE(table.back().find("largest disagreement: point_to_point"), std::string::npos) << table.back();
  // Rank 1 ran a fused B: one backward row against the predicted I and W together.
  const std::vector<TermRow> fused = compare_step(predicted_rank0(), measure_step(two_ranks(), 1));
  ASSERT_GE(fused.size(), 2u);
  EXPECT_EQ(fused[1].name, "backward (B = I + W)");
  EXPECT_NEAR(fused[1].predicted_s, 1.4e-3, 1e-12);
  EXPECT_EQ(fused[1].predicted_terms, "input_grad 0.900 + weight_grad 0.500");
}

// two_ranks() as the trainer records it with wait timing (layers/comm_wait.hpp): rank 0's F0 blocked 0.2 ms on tp
// collectives and 0.1 ms on a ZeRO-3 gather, its I0 0.3 ms on tp; the waits are in the spans' time.
pipeline::Timeline two_ranks_with_waits() {
  pipeline::Timeline t = two_ranks();
  t.ranks[0][0].comm_wait = {0.2, 0.0, 0.1, 0.0};  // F0 (1.0 ms): tp 0.2, zero_gather 0.1
  t.ranks[0][5].comm_wait = {0.3, 0.0, 0.0, 0.0};  // I0 (1.0 ms): tp 0.3
  return t;
}

// A prediction for rank 0 with a tp term in F and I and a zero_gather term in F.
StepBreakdown predicted_with_collectives() {
  ActionTerms f, i, w, o;
  f[T::kForward] = 1.5e-3, f[T::kTensorParallel] = 0.3e-3, f[T::kZeroGather] = 0.05e-3;
  i[T::kInputGrad] = 0.9e-3, i[T::kTensorParallel] = 0.2e-3;
  w[T::kWeightGrad] = 0.5e-3;
  o[T::kOptimizer] = 0.2e-3;
  return predicted(f, i, w, o);
}

TEST(MeasuredStep, CollectiveWaitsLeaveTheComputeRowsForRowsOfTheirOwn) {
  const MeasuredStep m = measure_step(two_ranks_with_waits(), 0);
  ASSERT_TRUE(m.has_comm_waits());
  EXPECT_NEAR(m[A::kForward], 2.0e-3 - 0.3e-3, 1e-12);   // F0 and F1 less F0's waits
  EXPECT_NEAR(m[A::kInputGrad], 1.0e-3 - 0.3e-3, 1e-12);
  EXPECT_NEAR(m.comm_wait_s[0], 0.5e-3, 1e-12);  // tp
  EXPECT_NEAR(m.comm_wait_s[1], 0.0, 1e-12);     // cp
  EXPECT_NEAR(m.comm_wait_s[2], 0.1e-3, 1e-12);  // zero_gather
  EXPECT_NEAR(m.total(), m.step_s, 1e-12);       // the rows still tile the step
  // The trace the trainer writes carries the waits (args wait_<kind>_us) and reads back to the same step.
  pipeline::TraceOptions options;
  options.microseconds_per_unit = 1000.0;
  const std::string json = pipeline::chrome_trace_json(two_ranks_with_waits(), options);
  EXPECT_NE(json.find("\"wait_tp_us\""), std::string::npos);
  EXPECT_NE(json.find("\"wait_zero_gather_us\""), std::string::npos);
  EXPECT_EQ(json.find("\"wait_cp_us\""), std::string::npos);  // no wait, no key
  const MeasuredStep back = measure_step(read_chrome_trace(json, "trace.json"), 0);
  for (std::size_t k = 0; k < m.comm_wait_s.size(); ++k) EXPECT_NEAR(back.comm_wait_s[k], m.comm_wait_s[k], 1e-9);
  EXPECT_NEAR(back[A::kForward], m[A::kForward], 1e-9);
  // The median keeps them per kind.
  EXPECT_NEAR(median_step({m, back, m}).comm_wait_s[0], 0.5e-3, 1e-9);

  const std::vector<TermRow> rows = compare_step(predicted_with_collectives(), m);
  std::vector<std::string> names;
  for (const auto& r : rows) names.push_back(r.name);
  // cp and expert_all_to_all: neither predicted nor measured, left out.
  EXPECT_EQ(names, (std::vector<std::string>{"forward (F)", "input_grad (I)", "weight_grad (W)",
                                             "optimizer (OPTIMIZER_STEP)", "tp (waits in F/I/W)",
                                             "zero_gather (waits in F/I/W)", "point_to_point", "bubble", "total"}));
  EXPECT_EQ(rows[0].predicted_terms, "forward 1.500");  // tensor_parallel and zero_gather moved to their rows
  EXPECT_NEAR(rows[0].predicted_s, 1.5e-3, 1e-12);
  EXPECT_NEAR(rows[0].measured_s, 1.7e-3, 1e-12);
  EXPECT_EQ(rows[1].predicted_terms, "input_grad 0.900");
  EXPECT_EQ(rows[4].predicted_terms, "tensor_parallel 0.500");  // F's 0.3 and I's 0.2
  EXPECT_NEAR(rows[4].predicted_s, 0.5e-3, 1e-12);
  EXPECT_NEAR(rows[4].measured_s, 0.5e-3, 1e-12);
  EXPECT_EQ(rows[5].predicted_terms, "zero_gather 0.050");
  EXPECT_NEAR(rows[5].measured_s, 0.1e-3, 1e-12);
  EXPECT_NEAR(rows.back().predicted_s, predicted_with_collectives().total(), 1e-12);  // the total is unchanged
  // The rows but total sum to the predicted and to the measured step.
  double predicted = 0, measured = 0;
  for (std::size_t r = 0; r + 1 < rows.size(); ++r) predicted += rows[r].predicted_s, measured += rows[r].measured_s;
  EXPECT_NEAR(predicted, rows.back().predicted_s, 1e-12);
  EXPECT_NEAR(measured, rows.back().measured_s, 1e-12);
  EXPECT_EQ(comparison_table(rows).size(), rows.size() + 2);
  // Without waits (an older trainer's trace) the collectives stay in the compute rows.
  const std::vector<TermRow> old = compare_step(predicted_with_collectives(), measure_step(two_ranks(), 0));
  EXPECT_EQ(old[0].predicted_terms, "forward 1.500 + tensor_parallel 0.300 + zero_gather 0.050");
}

// The predicted terms by kind of action are the busy terms: over the kinds they sum to every term but
// point_to_point and bubble, for every plan a search ranks (pipelines, tp, dp, ZeRO among them).
// The meetings' terms go where the trainer times what they price: the count exchange inside the expert_all_to_all
// waits (its timer spans plan_dispatch and the dispatch), point_to_point_wait in the point_to_point row; a row
// names point_to_point_wait only when it is not 0.
TEST(MeasuredStep, CountExchangeAndTransferWaitsJoinTheRowsThatTimeThem) {
  StepBreakdown b;
  ActionTerms f, i;
  f[T::kForward] = 1.0e-3, f[T::kExpertAllToAll] = 0.4e-3, f[T::kCountExchange] = 0.1e-3;
  i[T::kInputGrad] = 1.0e-3, i[T::kExpertAllToAll] = 0.3e-3;
  b.add_action(A::kForward, f), b.add_action(A::kInputGrad, i);
  for (const auto& terms : b.by_action) {
    for (std::size_t t = 0; t < terms.size(); ++t) b.seconds[t] += terms[t];
  }
  b.seconds[static_cast<std::size_t>(T::kPointToPoint)] = 0.2e-3;
  b.seconds[static_cast<std::size_t>(T::kPointToPointWait)] = 0.3e-3;
  MeasuredStep m;
  m.actions[static_cast<std::size_t>(A::kForward)] = 1.1e-3;
  m.actions[static_cast<std::size_t>(A::kInputGrad)] = 0.9e-3;
  m.comm_wait_s[3] = 0.9e-3;  // expert_all_to_all
  m.point_to_point_s = 0.6e-3;
  m.step_s = m.total();
  const std::vector<TermRow> rows = compare_step(b, m);
  const auto row = [&](const std::string& name) {
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const TermRow& r) { return r.name == name; });
    EXPECT_NE(it, rows.end()) << name;
    return it == rows.end() ? TermRow{} : *it;
  };
  const TermRow ep = row("expert_all_to_all (waits in F/I/W)");
  EXPECT_EQ(ep.predicted_terms, "expert_all_to_all 0.700 + count_exchange 0.100");
  EXPECT_NEAR(ep.predicted_s, 0.8e-3, 1e-12);
  EXPECT_EQ(row("forward (F)").predicted_terms, "forward 1.000");
  const TermRow p2p = row("point_to_point");
  EXPECT_EQ(p2p.predicted_terms, "point_to_point 0.200 + point_to_point_wait 0.300");
  EXPECT_NEAR(p2p.predicted_s, 0.5e-3, 1e-12);
  EXPECT_NEAR(rows.back().predicted_s, b.total(), 1e-12);
  b.seconds[static_cast<std::size_t>(T::kPointToPointWait)] = 0;
  const std::vector<TermRow> without = compare_step(b, m);
  ASSERT_EQ(without[3].name, "point_to_point");
  EXPECT_EQ(without[3].predicted_terms, "point_to_point 0.200");
}

TEST(MeasuredStep, PredictedTermsByActionSumToTheBusyTerms) {
  const auto dir = std::filesystem::temp_directory_path() / ("cleave_measured_step_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string config = (dir / "tiny.json").string();
  std::ofstream(config) << R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48, "n_layers": 4,
      "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  const HardwareProfile p = testing::synthetic_profile(1e9, 1e9, Link{2e-5, 1e9}, Link{5e-5, 1e8}, 2);
  const SearchResult r = search_plans(config, {}, p, SearchOptions{4, 0});
  std::filesystem::remove_all(dir);
  ASSERT_GT(r.ranked.size(), 100u);
  for (const auto& e : r.ranked) {
    const StepBreakdown& b = e.breakdown;
    for (int t = 0; t < kNumStepTerms; ++t) {
      const auto term = static_cast<StepTerm>(t);
      if (term == T::kPointToPoint || term == T::kPointToPointWait || term == T::kBubble) continue;
      double sum = 0;
      for (const auto& terms : b.by_action) sum += terms[static_cast<std::size_t>(t)];
      EXPECT_NEAR(sum, b[term], 1e-12 + 1e-9 * e.step_s) << e.choice.layout() << " " << step_term_info(term).name;
    }
  }
}

}  // namespace
}  // namespace cleave::planner::measured_step_test
