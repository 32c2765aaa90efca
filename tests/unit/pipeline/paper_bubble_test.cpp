// The zero-bubble paper's published bubble rates, reproduced by the simulator.
//
// Source: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism" (arXiv 2401.10241v1 / ICLR 2024), Table 5
// ("Bubble rates of 1F1B, 1F1B-I, ZB-H1, ZB-H2, ZB-1p, ZB-2p") computed there from the profiled T_F, T_B, T_W
// and T_comm of their Table 9 (Appendix D). Their definition: bubble rate = (cost − m(T_F + T_B + T_W)) /
// cost with cost "the largest execution time of all stages", i.e. the longest per-rank span from a rank's
// first action to its last (their ZB-H2 rate is 0 for T_F = T_B = T_W, so start offsets are not counted).
// Here: F = T_F, I = T_B, W = T_W per stage, p2p_latency = T_comm per transfer, our zb_h1 / zb_h2 orders, and
// the rate computed with that definition from the simulated timeline. Asserted within 0.01 (the target);
// every row agrees to 1e-4 when this was written.
//
// The automatic scheduler is run on the p = 8 rows with the paper's ZB-1p memory (p) and ZB-2p memory (2p),
// minimising the paper's cost (the longest span): at least as good as ZB-H1 / ZB-H2, and within 0.01 of the
// paper's ZB-1p. Their ZB-2p budget is 2p·M_B where a stash after its B (our I) weighs only M_W ≈ 0.37–0.43 M_B
// (their Table 1); in our default accounting a stash weighs 1 until its W, which leaves far fewer W to defer.
// With their accounting (AutoScheduleOptions::weight_stash_fraction = M_W / M_B) the result must be within 0.01
// of (in fact at or below) their ZB-2p. With the makespan objective (this engine's synchronised optimizer
// step) it must be no slower than ZB-H2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "pipeline/schedules/auto_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::pipeline::paper_bubble_test {
namespace {

struct PaperRow {
  const char* model;
  int p, m;
  double t_f, t_b, t_w, t_comm;                     // Table 9, ms
  double h1, h2, zb1p, zb2p;                        // Table 5 bubble rates
};

// M_W / M_B of one transformer layer from the paper's Table 1, M_B = sb(34h + 5as), M_W = 32sbh, with the
// models of their Table 3 (s = 1024): 1.5B h = 2304, a = 24; 6.2B h = 4096, a = 32.
double weight_stash_fraction(const PaperRow& row) {
  const double s = 1024;
  const double h = row.model[0] == '1' ? 2304 : 4096, a = row.model[0] == '1' ? 24 : 32;
  return 32 * h / (34 * h + 5 * a * s);
}

constexpr PaperRow kRows[] = {
    {"1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, 0.1585, 0.1083, 0.1585, 0.0433},
    {"1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, 0.1242, 0.0837, 0.1242, 0.0039},
    {"1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, 0.0674, 0.0444, 0.0674, 0.0026},
    {"6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, 0.1323, 0.0698, 0.1323, 0.0029},
    {"6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, 0.1045, 0.0559, 0.1045, 0.0022},
    {"6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, 0.0554, 0.0294, 0.0554, 0.0010},
    {"14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, 0.1397, 0.0672, 0.1397, 0.0066},
    {"14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, 0.1088, 0.0516, 0.1088, 0.0054},
    {"14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, 0.0576, 0.0266, 0.0576, 0.0028},
    {"28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, 0.1421, 0.0641, 0.1421, 0.0038},
    {"28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, 0.1106, 0.0490, 0.1106, 0.0029},
    {"28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, 0.0594, 0.0257, 0.0594, 0.0018},
};

SimulationCosts paper_costs(const PaperRow& row) {
  SimulationCosts costs = SimulationCosts::uniform(row.p, row.t_f, row.t_b, row.t_w);
  costs.p2p_latency = row.t_comm;
  return costs;
}

// The paper's bubble rate: (longest rank span − m(F + B + W)) / longest rank span.
double paper_bubble_rate(const SimulationResult& sim, const PaperRow& row) {
  double cost = 0;
  for (const auto& rank : sim.stats.ranks) cost = std::max(cost, rank.last_end - rank.first_start);
  return (cost - row.m * (row.t_f + row.t_b + row.t_w)) / cost;
}

TEST(PaperBubbleRates, ZeroBubbleH1AndH2MatchTable5WithinOneHundredth) {
  std::printf("[ paper ] model   p    m  | ZB-H1 sim  paper   | ZB-H2 sim  paper\n");
  for (const PaperRow& row : kRows) {
    SCOPED_TRACE(::testing::Message() << row.model << " p=" << row.p << " m=" << row.m);
    const SimulationCosts costs = paper_costs(row);
    const double h1 = paper_bubble_rate(simulate(zb_h1_schedule(row.p, row.m), costs), row);
    const double h2 = paper_bubble_rate(simulate(zb_h2_schedule(row.p, row.m), costs), row);
    std::printf("[ paper ] %-6s %2d %4d  | %.4f    %.4f  | %.4f    %.4f\n", row.model, row.p, row.m, h1, row.h1, h2,
                row.h2);
    EXPECT_NEAR(h1, row.h1, 0.01);
    EXPECT_NEAR(h2, row.h2, 0.01);
  }
}

TEST(PaperBubbleRates, AutomaticScheduleAtOneAndTwoPMemoryIsAtLeastTheHandcraftedOnes) {
  std::printf("[ paper ] objective span (the paper's cost) | objective makespan (this engine's synchronised step)\n");
  std::printf(
      "[ paper ] model   p    m  | auto@p  ZB-H1   ZB-1p   | auto@2p auto@2p(M_W) ZB-H2 ZB-2p | makespan auto@2p / ZB-H2\n");
  for (const PaperRow& row : kRows) {
    if (row.p != 8) continue;  // the search's cost grows with p·m; the p = 8 rows keep this test short
    SCOPED_TRACE(::testing::Message() << row.model << " p=" << row.p << " m=" << row.m);
    const SimulationCosts costs = paper_costs(row);
    auto run = [&](int limit, AutoScheduleObjective objective) {
      AutoScheduleOptions options;
      options.costs = costs;
      options.memory_limit = limit;
      options.objective = objective;
      const SimulationResult sim = simulate(auto_schedule(row.p, row.m, options).schedule, costs);
      for (const auto& rank : sim.stats.ranks) EXPECT_LE(rank.peak_activations, limit);
      return sim;
    };
    const auto span_1p = run(row.p, AutoScheduleObjective::kSpan);
    const auto span_2p = run(2 * row.p, AutoScheduleObjective::kSpan);
    // The paper's memory accounting: a stash weighs M_W / M_B between its I and its W.
    AutoScheduleOptions paper_memory;
    paper_memory.costs = costs;
    paper_memory.memory_limit = 2 * row.p;
    paper_memory.weight_stash_fraction = weight_stash_fraction(row);
    paper_memory.objective = AutoScheduleObjective::kSpan;
    const double rate_2p_paper_memory =
        paper_bubble_rate(simulate(auto_schedule(row.p, row.m, paper_memory).schedule, costs), row);
    const auto makespan_2p = run(2 * row.p, AutoScheduleObjective::kMakespan);
    const auto sim_h1 = simulate(zb_h1_schedule(row.p, row.m), costs);
    const auto sim_h2 = simulate(zb_h2_schedule(row.p, row.m), costs);
    const double rate_1p = paper_bubble_rate(span_1p, row), rate_2p = paper_bubble_rate(span_2p, row);
    const double rate_h1 = paper_bubble_rate(sim_h1, row), rate_h2 = paper_bubble_rate(sim_h2, row);
    std::printf("[ paper ] %-6s %2d %4d  | %.4f  %.4f  %.4f  | %.4f  %.4f  %.4f  %.4f | %.2f / %.2f\n", row.model,
                row.p, row.m, rate_1p, rate_h1, row.zb1p, rate_2p, rate_2p_paper_memory, rate_h2, row.zb2p,
                makespan_2p.stats.makespan, sim_h2.stats.makespan);
    EXPECT_NEAR(rate_1p, row.zb1p, 0.01);
    EXPECT_LE(rate_2p_paper_memory, row.zb2p + 0.01);
    EXPECT_LE(rate_1p, rate_h1 + 1e-9);
    EXPECT_LE(rate_2p, rate_h2 + 1e-9);
    EXPECT_LE(makespan_2p.stats.makespan, sim_h2.stats.makespan + 1e-9);
  }
}

}  // namespace
}  // namespace cleave::pipeline::paper_bubble_test
