// Schedule generators over the grid p ∈ {1..8}, m ∈ {1..4p}, v ∈ {1, 2, 3} where the schedule takes v:
// action counts, the validator passes (compute and lowered forms), and the simulator with unit costs
// (F = I = W = 1, so B = 2) reproduces each schedule's bubble exactly:
//   gpipe, 1f1b        every rank idles 3(p − 1); bubble_fraction = (p − 1)/(m + p − 1)
//   interleaved_1f1b   every rank idles 3((p − 1) + (v − 1)·max(0, p − m)); for m ≥ p that is
//                      bubble_fraction = (p − 1)/(v·m + p − 1)
//   zb_h1              m ≥ p: every rank idles exactly p − 1 = one third of 1F1B's idle time (compared with
//                      a 1F1B simulation of the same p, m); m < p: 2p − 1 − m
//   zb_v               m ≥ 2p − 1: stage_bubble_fraction == 0 on every rank (idle between a rank's own
//                      first and last action, docs/architecture.md), makespan 6m + p − 1, bubble_fraction
//                      (p − 1)/(6m + p − 1); m < 2p − 1: stage bubble > 0 when p > 1
//   zb_h2              never slower than zb_h1; m ≥ 2p − 1: stage_bubble_fraction == 0 on every rank,
//                      makespan 3m + p − 1, rank 0 holds 2p − 1 stashes
//   dualpipev          m < 2p: a clear error naming the numbers; else makespan 6m + p − 1 (as ZB-V), rank r
//                      idles p − 1 − r inside its own span, holds 2p + 1 chunk stashes, runs m − 2p + r + 1
//                      F&B pairs
// and the peak live activations each generator file states (1F1B rank 0 ≤ p, GPipe = m).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/validator.hpp"
#include "support/error_of.hpp"

namespace cleave::pipeline::generators_test {
namespace {

constexpr double kExact = 1e-12;

struct Counts {
  int f = 0, i = 0, w = 0, b = 0, send_f = 0, recv_f = 0, send_b = 0, recv_b = 0, reduce = 0, step = 0;
};

Counts count(const Schedule& s) {
  Counts c;
  for (const auto& rank : s.ranks) {
    for (const auto& a : rank) {
      switch (a.kind) {
        case ActionKind::kForward: ++c.f; break;
        case ActionKind::kBackwardInput: ++c.i; break;
        case ActionKind::kBackwardWeight: ++c.w; break;
        case ActionKind::kBackward: ++c.b; break;
        case ActionKind::kSendF: ++c.send_f; break;
        case ActionKind::kRecvF: ++c.recv_f; break;
        case ActionKind::kSendB: ++c.send_b; break;
        case ActionKind::kRecvB: ++c.recv_b; break;
        case ActionKind::kReduceGrad: ++c.reduce; break;
        case ActionKind::kOptimizerStep: ++c.step; break;
      }
    }
  }
  return c;
}

// Boundaries s → s+1 whose stages sit on different ranks.
int cross_rank_boundaries(const Schedule& s) {
  int n = 0;
  for (int stage = 0; stage + 1 < s.num_stages; ++stage) n += s.rank_of(stage) != s.rank_of(stage + 1);
  return n;
}

// Checks shared by every generator; returns the unit-cost simulation.
SimulationResult check_common(const Schedule& s, bool split_backward) {
  const int p = s.pp_size, m = s.num_microbatches, stages = s.num_stages;
  EXPECT_EQ(stages, p * s.virtual_stages);
  const Counts c = count(s);
  EXPECT_EQ(c.f, stages * m);
  EXPECT_EQ(c.b, split_backward ? 0 : stages * m);
  EXPECT_EQ(c.i, split_backward ? stages * m : 0);
  EXPECT_EQ(c.w, split_backward ? stages * m : 0);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(static_cast<int>(s.ranks[r].size()), s.virtual_stages * m * (split_backward ? 3 : 2)) << "rank " << r;
  }
  EXPECT_FALSE(s.is_lowered());
  const ValidationResult compute = validate_schedule(s);
  EXPECT_TRUE(compute.ok) << compute.message(s.name);

  const Schedule lowered = lower_schedule(s);
  const ValidationResult lowered_check = validate_schedule(lowered);
  EXPECT_TRUE(lowered_check.ok) << lowered_check.message(s.name);
  const Counts lc = count(lowered);
  const int transfers = cross_rank_boundaries(s) * m;
  EXPECT_EQ(lc.send_f, transfers);
  EXPECT_EQ(lc.recv_f, transfers);
  EXPECT_EQ(lc.send_b, transfers);
  EXPECT_EQ(lc.recv_b, transfers);
  EXPECT_EQ(lc.reduce, stages);
  EXPECT_EQ(lc.step, p);

  SimulationResult sim = simulate(s, SimulationCosts::uniform(stages));
  EXPECT_EQ(static_cast<int>(sim.stats.ranks.size()), p);
  for (int r = 0; r < p; ++r) {
    // Busy time: F = 1, and I + W or B = 2, for every (stage, micro-batch) the rank holds.
    EXPECT_NEAR(sim.stats.ranks[r].busy, 3.0 * s.virtual_stages * m, kExact);
    EXPECT_EQ(sim.stats.ranks[r].peak_activations, peak_activations(s.ranks[r]));
  }
  return sim;
}

using cleave::testing::error_of;

double idle(const SimulationResult& sim, int r) { return sim.stats.makespan - sim.stats.ranks[r].busy; }

template <typename Body>
void for_grid(Body body) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 4 * p; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      body(p, m);
    }
  }
}

TEST(Generators, GPipeBubbleAndMemory) {
  for_grid([](int p, int m) {
    const Schedule s = gpipe_schedule(p, m);
    const auto sim = check_common(s, false);
    EXPECT_NEAR(sim.stats.bubble_fraction, double(p - 1) / (m + p - 1), kExact);
    EXPECT_NEAR(sim.stats.makespan, 3.0 * (m + p - 1), kExact);
    for (int r = 0; r < p; ++r) {
      EXPECT_NEAR(idle(sim, r), 3.0 * (p - 1), kExact);
      EXPECT_EQ(sim.stats.ranks[r].peak_activations, m);
    }
  });
}

TEST(Generators, OneFOneBBubbleAndMemory) {
  for_grid([](int p, int m) {
    const Schedule s = one_f_one_b_schedule(p, m);
    const auto sim = check_common(s, false);
    EXPECT_NEAR(sim.stats.bubble_fraction, double(p - 1) / (m + p - 1), kExact);
    for (int r = 0; r < p; ++r) {
      EXPECT_NEAR(idle(sim, r), 3.0 * (p - 1), kExact);
      EXPECT_EQ(sim.stats.ranks[r].peak_activations, std::min(p - r, m));
    }
    EXPECT_LE(sim.stats.ranks[0].peak_activations, p);
  });
}

TEST(Generators, OneFOneBAndGPipeBubbleHoldsForUnequalForwardBackward) {
  // The (p−1)/(m+p−1) form does not depend on the F:B ratio; B = I + W = 1 + 2 here.
  for (int p : {2, 3, 5, 8}) {
    for (int m : {1, p - 1, p, 2 * p + 1}) {
      if (m < 1) continue;
      for (const Schedule& s : {gpipe_schedule(p, m), one_f_one_b_schedule(p, m)}) {
        const auto sim = simulate(s, SimulationCosts::uniform(p, 1.0, 1.0, 2.0));
        EXPECT_NEAR(sim.stats.bubble_fraction, double(p - 1) / (m + p - 1), kExact) << s.name << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(Generators, InterleavedBubbleMatchesDerivedFormula) {
  for (int v : {2, 3}) {
    for_grid([v](int p, int m) {
      SCOPED_TRACE(::testing::Message() << "v=" << v);
      const Schedule s = interleaved_1f1b_schedule(p, m, v);
      const auto sim = check_common(s, false);
      const double expected_idle = 3.0 * ((p - 1) + (v - 1) * std::max(0, p - m));
      for (int r = 0; r < p; ++r) EXPECT_NEAR(idle(sim, r), expected_idle, kExact) << "rank " << r;
      if (m >= p) {
        EXPECT_NEAR(sim.stats.bubble_fraction, double(p - 1) / (v * m + p - 1), kExact);
      } else {
        EXPECT_NEAR(sim.stats.bubble_fraction, double(v * (p - m) + m - 1) / (v * p + m - 1), kExact);
      }
      // Memory: W_r + 1 chunk stashes, W_r = 2(p − 1 − r) + (v − 1)·g0, g0 = first group size.
      const int g0 = m < p ? m : m / (m / p) + (m % (m / p) > 0 ? 1 : 0);
      for (int r = 0; r < p; ++r) {
        const int warmup = std::min(2 * (p - 1 - r) + (v - 1) * g0, v * m);
        EXPECT_EQ(sim.stats.ranks[r].peak_activations, std::min(v * m, warmup + 1)) << "rank " << r;
      }
    });
  }
}

TEST(Generators, ZeroBubbleH1IdlesOneThirdOfOneFOneB) {
  for_grid([](int p, int m) {
    const Schedule s = zb_h1_schedule(p, m);
    const auto sim = check_common(s, true);
    const auto baseline = simulate(one_f_one_b_schedule(p, m), SimulationCosts::uniform(p));
    for (int r = 0; r < p; ++r) {
      if (m >= p) {
        EXPECT_NEAR(idle(sim, r), p - 1.0, kExact) << "rank " << r;
        EXPECT_NEAR(3.0 * idle(sim, r), idle(baseline, r), kExact) << "rank " << r;
      } else {
        EXPECT_NEAR(idle(sim, r), 2.0 * p - 1 - m, kExact) << "rank " << r;
      }
      EXPECT_EQ(sim.stats.ranks[r].peak_activations, std::min(p, m));
    }
    if (m >= p) {
      EXPECT_NEAR(sim.stats.bubble_fraction, (p - 1.0) / (3.0 * m + p - 1), kExact);
    }
  });
}

TEST(Generators, ZeroBubbleVHasNoStageBubbleOnceMicrobatchesFillTheV) {
  for_grid([](int p, int m) {
    const Schedule s = zb_v_schedule(p, m);
    EXPECT_EQ(cross_rank_boundaries(s), 2 * p - 2);  // the turn p−1 → p stays on rank p−1
    const auto sim = check_common(s, true);
    if (m >= 2 * p - 1) {
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(sim.stats.ranks[r].stage_bubble_fraction, 0.0, kExact) << "rank " << r;
        EXPECT_NEAR(sim.stats.ranks[r].first_start, r, kExact);
        EXPECT_EQ(sim.stats.ranks[r].peak_activations, 2 * p);
      }
      EXPECT_NEAR(sim.stats.stage_bubble_fraction, 0.0, kExact);
      EXPECT_NEAR(sim.stats.makespan, 6.0 * m + p - 1, kExact);
      EXPECT_NEAR(sim.stats.bubble_fraction, (p - 1.0) / (6.0 * m + p - 1), kExact);
    } else if (p > 1) {
      EXPECT_GT(sim.stats.stage_bubble_fraction, 0.0);
    }
    for (int r = 0; r < p; ++r) EXPECT_LE(sim.stats.ranks[r].peak_activations, std::min(2 * p, 2 * m));
  });
}

TEST(Generators, ZeroBubbleH2HasNoStageBubbleOnceMicrobatchesFillTheWarmup) {
  for_grid([](int p, int m) {
    const Schedule s = zb_h2_schedule(p, m);
    const auto sim = check_common(s, true);
    const auto h1 = simulate(zb_h1_schedule(p, m), SimulationCosts::uniform(p));
    EXPECT_LE(sim.stats.makespan, h1.stats.makespan + kExact);  // never slower than ZB-H1
    for (int r = 0; r < p; ++r) EXPECT_LE(sim.stats.ranks[r].peak_activations, std::min(2 * p - 1, m)) << "rank " << r;
    if (m >= 2 * p - 1) {
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(sim.stats.ranks[r].stage_bubble_fraction, 0.0, kExact) << "rank " << r;
        EXPECT_NEAR(sim.stats.ranks[r].first_start, r, kExact);
      }
      EXPECT_EQ(sim.stats.ranks[0].peak_activations, 2 * p - 1);
      EXPECT_NEAR(sim.stats.makespan, 3.0 * m + p - 1, kExact);
      EXPECT_NEAR(sim.stats.bubble_fraction, (p - 1.0) / (3.0 * m + p - 1), kExact);
    } else if (p > 1) {
      EXPECT_GT(sim.stats.stage_bubble_fraction, 0.0);
    }
  });
}

// DualPipeV: the order of DeepSeek's reference code (dualpipev.cpp), m >= 2p (fewer: an error naming the
// numbers). The F&B pairs are where the rule puts them; timings with F = I = W = 1 below.
TEST(Generators, DualPipeVPairsForwardWithBackwardAndNeedsTwoMicrobatchesPerRank) {
  for_grid([](int p, int m) {
    if (m < 2 * p) {
      const std::string e = error_of([&] { dualpipev_schedule(p, m); });
      EXPECT_NE(e.find("needs at least 2 × pp_size = " + std::to_string(2 * p) + " micro-batches per step, got " +
                       std::to_string(m)),
                std::string::npos)
          << e;
      EXPECT_NE(error_of([&] { make_schedule("dualpipev", p, m, 2); }).find("micro-batches per step, got"),
                std::string::npos);
      return;
    }
    const Schedule s = dualpipev_schedule(p, m);
    EXPECT_EQ(cross_rank_boundaries(s), 2 * p - 2);  // the turn p−1 → p stays on rank p−1
    EXPECT_EQ(s.stage_to_rank, zb_v_schedule(p, m).stage_to_rank);
    const auto sim = check_common(s, true);
    for (int r = 0; r < p; ++r) {
      EXPECT_NEAR(sim.stats.ranks[r].first_start, r, kExact);
      // The F&B pairs: [F s0, I s1, W s1, F s1, I s0, W s0], m − 2p + r + 1 times in a row.
      const int s0 = r, s1 = 2 * p - 1 - r;
      const auto& a = s.ranks[r];
      int pairs = 0;
      for (std::size_t k = 0; k + 5 < a.size(); ++k) {
        const auto is = [&](std::size_t at, ActionKind kind, int stage) {
          return a[at].kind == kind && a[at].stage == stage;
        };
        if (is(k, ActionKind::kForward, s0) && is(k + 1, ActionKind::kBackwardInput, s1) &&
            is(k + 2, ActionKind::kBackwardWeight, s1) && is(k + 3, ActionKind::kForward, s1) &&
            is(k + 4, ActionKind::kBackwardInput, s0) && is(k + 5, ActionKind::kBackwardWeight, s0)) {
          EXPECT_NE(a[k].microbatch, a[k + 1].microbatch);  // forward of one micro-batch, backward of another
          ++pairs;
        }
      }
      EXPECT_EQ(pairs, m - 2 * p + r + 1) << "rank " << r;
    }
    // F = I = W = 1: the same makespan as ZB-V, 6m + p − 1, but every rank ends at the makespan (the tail is a
    // rectangle, not ZB-V's parallelogram), so rank r idles p − 1 − r units inside its own span.
    EXPECT_NEAR(sim.stats.makespan, 6.0 * m + p - 1, kExact);
    EXPECT_NEAR(sim.stats.bubble_fraction, (p - 1.0) / (6.0 * m + p - 1), kExact);
    for (int r = 0; r < p; ++r) {
      EXPECT_NEAR(sim.stats.ranks[r].last_end - sim.stats.ranks[r].first_start - sim.stats.ranks[r].busy, p - 1.0 - r,
                  kExact)
          << "rank " << r;
      EXPECT_NEAR(sim.stats.ranks[r].last_end, sim.stats.makespan, kExact) << "rank " << r;
      EXPECT_EQ(sim.stats.ranks[r].peak_activations, 2 * p + 1) << "rank " << r;
    }
  });
}

TEST(Generators, RegistryBuildsEveryScheduleByName) {
  for (auto name : schedule_names()) {
    const int v = default_virtual_stages(name);
    const Schedule s = make_schedule(name, 3, 7, v);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.pp_size, 3);
    EXPECT_EQ(s.num_microbatches, 7);
    EXPECT_EQ(s.virtual_stages, v);
    EXPECT_TRUE(validate_schedule(s).ok);
  }
  EXPECT_EQ(make_schedule("interleaved_1f1b", 2, 4, 3).num_stages, 6);
  // Every entry builds its own schedule at every virtual-stage count it accepts (each entry carries its
  // generator; nothing falls through to another one).
  for (auto name : schedule_names()) {
    for (int v = 1; v <= 3; ++v) {
      try {
        const Schedule s = make_schedule(name, 2, 4, v);
        EXPECT_EQ(s.name, name) << "v " << v;
        EXPECT_EQ(s.virtual_stages, v) << name;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("got virtual_stages " + std::to_string(v)), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_EQ(default_virtual_stages("1f1b"), 1);
  EXPECT_EQ(default_virtual_stages("zb_v"), 2);
  EXPECT_EQ(default_virtual_stages("dualpipev"), 2);
  EXPECT_EQ(default_virtual_stages("zb_h2"), 1);
  EXPECT_EQ(default_virtual_stages("auto"), 1);
}

TEST(Generators, RegistryRejectsImpossibleCombinations) {
  EXPECT_NE(error_of([] { make_schedule("2f2b", 4, 8, 1); }).find("unknown schedule '2f2b' (known: gpipe, 1f1b, "
                                                                    "interleaved_1f1b, zb_h1, zb_h2, zb_v, dualpipev, "
                                                                    "auto"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("dualpipev", 4, 6, 2); })
                .find("schedule dualpipev needs at least 2 × pp_size = 8 micro-batches per step, got 6 (pp_size 4)"),
            std::string::npos);
  EXPECT_EQ(schedule_min_microbatches("dualpipev", 4), 8);
  EXPECT_EQ(schedule_min_microbatches("zb_h2", 4), 1);
  EXPECT_NE(error_of([] { make_schedule("zb_h2", 4, 8, 2); }).find("schedule zb_h2 runs one stage per rank"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("auto", 4, 8, 2); }).find("schedule auto runs one stage per rank"),
            std::string::npos);
  const std::string v_for_1f1b = error_of([] { make_schedule("1f1b", 4, 8, 2); });
  EXPECT_NE(v_for_1f1b.find("schedule 1f1b runs one stage per rank"), std::string::npos) << v_for_1f1b;
  EXPECT_NE(v_for_1f1b.find("got virtual_stages 2"), std::string::npos) << v_for_1f1b;
  EXPECT_NE(error_of([] { make_schedule("interleaved_1f1b", 4, 8, 1); }).find("at least 2 virtual stages"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("zb_v", 4, 8, 3); }).find("exactly 2 chunks per rank"), std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("gpipe", 0, 8, 1); }).find("pp_size must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("zb_h1", 4, 0, 1); }).find("micro-batches must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { interleaved_1f1b_schedule(2, 4, 1); }).find("got 1"), std::string::npos);
}

}  // namespace
}  // namespace cleave::pipeline::generators_test
