// The memory plan's whole figure against the allocator's whole peak (issue 34 part 4, issue 36 part 7: within 2% at
// cp 2 and 4, ring and all_to_all, and at ep 2 and 4). Three figures a user sees, each against every rank's measured
// peak (MemoryStats::peak_total, the moment the categories together peak, below the sum of their own peaks):
//  - the trainer's plan (run_plan::estimate_rank_memory with the run's CPU kernels): MemoryPlan::total(), what
//    `cleave train` checks against device.memory_limit and run.json's estimate_total_bytes;
//  - the planner's (planner::estimate_plan, what `cleave plan` and `simulate --config` check and print): the same plan
//    on the CPU kernels the planner assumes for the layout (planned_cpu_kernels: the profile's cores over the ranks of
//    a node, here this process's threads);
//  - the peak of the planner's memory timeline (PlanDetails::timeline_peak).
// Each on the safe side (at least the measured peak, less the step's loss slots the plan leaves out: 4 B per
// micro-batch and dp x cp replica) and at most 2% above it. Before (RESULTS-long-context-2026-11-30.md, T 8,192): the
// planner's figure 7-12% above (the categories summed, and a block output standing for the CPU workspace), the
// timeline 4.4-5.2% under at all_to_all (the cost model's stash without cp's attention state).
// Runs at world 2 and 4: cp = world (dp 1), ep = world (dp = world), and plain data parallelism (gpt, llama; cp 1).
// GPipe on one stage, so the stashes the plans count dominate; a few steps of tiny models (seconds). Measured
// (2026-11-30): cp 2 and 4, both exchanges, and gpt and llama at dp: every figure the measured peak less the loss
// slots; ep 2 and 4 the busiest rank's to 16 B, the others up to +1.32% (rank 3 of ep 4). Before this test the
// trainer's plan was +1.31% at gpt dp and +1.2-3.1% at ep (the cp 1 attention scratch at the mlp's or the mixture's
// peak), and 1,024 B under at ep once that was fixed (the routing weights' gradient, workspace, uncounted).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "engine/planner/plan_search.hpp"
#include "engine/train/collectives.hpp"
#include "kernels/ops/ops.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/memory_compare.hpp"
#include "train_harness.hpp"

namespace cleave::testing::memory_plan_total_test {
namespace {

constexpr double kBound = 0.02;

// The largest value over the ranks of `world`.
std::int64_t max_over_ranks(comm::Communicator& world, std::int64_t mine) {
  const auto rows = train::all_gather_values<std::int64_t>(world, std::span<const std::int64_t>(&mine, 1));
  std::int64_t most = 0;
  for (const auto& row : rows) most = std::max(most, row.at(0));
  return most;
}

// A profile the planner prices with (free links: only memory is read here) whose node gives each of `ranks` ranks
// this process's kernel threads, as the trainer set them.
planner::HardwareProfile profile_for(int ranks) {
  planner::HardwareProfile p;
  p.name = p.source = "test";
  p.flops_f32 = p.flops_bf16 = 1e12;
  p.memory_bandwidth_Bps = 1e12;
  p.intra_node = p.inter_node = planner::Link{1e-6, 1e10};
  p.ranks_per_node = ranks;
  p.cores_per_node = ranks * ops::cpu_threads();
  return p;
}

// `planned` against `measured` (bytes): at least the measured peak less the loss slots, at most 2% above it.
void expect_within(const std::string& what, std::int64_t planned, std::int64_t measured, std::int64_t loss_slots) {
  std::printf("[ memory ] %s: planned %lld B, measured %lld B (%+.2f%%)\n", what.c_str(),
              static_cast<long long>(planned), static_cast<long long>(measured),
              100.0 * (static_cast<double>(planned) / static_cast<double>(measured) - 1));
  EXPECT_GE(planned, measured - loss_slots) << what << ": under the measured peak (the unsafe side)";
  EXPECT_LE(static_cast<double>(planned), (1 + kBound) * static_cast<double>(measured)) << what;
}

struct Layout {
  std::string model;                   // the config's "model" object
  std::vector<std::string> overrides;  // --set keys of the layout
  planner::PlanChoice choice;          // the same layout for the planner
  double ep_imbalance = 0;             // this rank's (the trainer's plan) under forced routing
  double planner_imbalance = 0;        // the busiest rank's (the planner's)
};

// Trains the layout and checks the three figures against the measured peak.
void check_layout(comm::Communicator& world, const Layout& l, const std::string& name) {
  const std::string text = "{" + l.model + R"(,
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    "optimizer": {"type": "adamw", "lr": 0.001, "warmup_steps": 0},
    "parallel": {"schedule": "gpipe"},
    "train": {"seed": 5, "eval_batches": 0, "steps": 2},
    "data": {"type": "synthetic"}
  })";
  const config::RunConfig config = config::parse_config(text, "memory_plan_total", l.overrides);
  train::Trainer trainer(config, world);
  for (std::int64_t s = 0; s < config.train.steps; ++s) trainer.step(s);
  config::RunConfig resolved = config;
  resolved.resolve(world.size());
  const std::int64_t measured = trainer.memory_stats().peak_total;
  const std::int64_t loss_slots = 4 * resolved.resolved_batch().gradient_accumulation_steps * world.size();
  const std::string where = name + " rank " + std::to_string(world.rank());
  // The trainer's plan, this rank's.
  const run_plan::MemoryPlan plan =
      run_plan::estimate_rank_memory(trainer.plan(), resolved, 0, train::cpu_kernels_of(resolved), l.ep_imbalance);
  expect_within(where + " trainer's plan", plan.total(), measured, loss_slots);
  std::string categories;  // what to read when a total drifts: each category's own peak, measured / planned
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    categories += fmt::format(" {} {}/{}", memory_category_name(category), trainer.memory_stats().peak_of(category),
                              plan.bytes[static_cast<std::size_t>(c)]);
  }
  std::printf("[ memory ] %s by category, measured/planned B:%s\n", where.c_str(), categories.c_str());
  // The planner's: one figure for the layout (the busiest rank's), against the largest measured peak.
  const std::int64_t busiest = max_over_ranks(world, measured);
  planner::PlanChoice choice = l.choice;
  choice.global_batch = 8;
  choice.micro_batch = 2;
  choice.schedule = "gpipe";
  planner::SearchOptions options{world.size(), 0};
  options.ep_imbalance = l.planner_imbalance;
  options.ep_memory = l.planner_imbalance;  // every block routed alike: one figure for both
  planner::PlanDetails details;
  const planner::PlanEstimate e = planner::estimate_plan(config, "memory_plan_total", l.overrides, choice,
                                                         profile_for(world.size()), options, &details);
  ASSERT_TRUE(e.valid) << e.reason;
  if (world.rank() == 0) {
    expect_within(name + " planner's plan", e.peak_bytes, busiest, loss_slots);
    expect_within(name + " planner's timeline peak", details.timeline_peak.at(0), busiest, loss_slots);
  }
}

constexpr const char* kGpt =
    R"("model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 4, "seq_len": 64})";

constexpr const char* kLlama =
    R"("model": {"type": "llama", "vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 8, "n_kv_heads": 4,
                 "seq_len": 64, "ffn_hidden_size": 48})";

TEST(MemoryPlanTotal, ContextParallelWithinTwoPercent) {
  auto world = make_world();
  const int cp = world->size();
  if (cp != 2 && cp != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const char* comm : {"ring", "all_to_all"}) {
    Layout l;
    l.model = kGpt;
    l.overrides = {"parallel.context_parallel_size=" + std::to_string(cp),
                   std::string("parallel.context_parallel_comm=") + comm};
    l.choice.cp = cp;
    l.choice.cp_comm =
        std::string(comm) == "ring" ? config::ContextParallelComm::kRing : config::ContextParallelComm::kAllToAll;
    check_layout(*world, l, "cp" + std::to_string(cp) + " " + comm);
  }
}

// The same figures without cp or ep (dp = world): the attention kernel's scratch placed where the core runs.
TEST(MemoryPlanTotal, DataParallelWithinTwoPercent) {
  auto world = make_world();
  for (const char* model : {kGpt, kLlama}) {
    Layout l;
    l.model = model;
    l.choice.dp = world->size();
    check_layout(*world, l, std::string(model == kGpt ? "gpt" : "llama") + " dp" + std::to_string(world->size()));
  }
}

TEST(MemoryPlanTotal, ExpertParallelWithinTwoPercent) {
  auto world = make_world();
  const int ep = world->size();
  if (ep != 2 && ep != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  constexpr std::int64_t kExperts = 8, kTopK = 2, kTokens = 2 * 64, kSteps = 2;
  Layout l;
  l.model = R"("model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 64,
                         "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2, "forced_routing": "zipf"})";
  l.overrides = {"parallel.expert_model_parallel_size=" + std::to_string(ep)};
  l.choice.dp = ep;
  l.choice.ep = ep;
  // The rows each ep rank's experts run, over the mean, max over the steps (the oracle's figure).
  const int ep_rank = world->rank() % ep;  // dp index mod ep (process_grid.hpp), cp 1, tp 1
  l.ep_imbalance = forced_routing_imbalance("zipf", kExperts, kTopK, kTokens, ep, ep_rank, 0, kSteps);
  for (int r = 0; r < ep; ++r) {
    l.planner_imbalance = std::max(l.planner_imbalance,
                                   forced_routing_imbalance("zipf", kExperts, kTopK, kTokens, ep, r, 0, kSteps));
  }
  check_layout(*world, l, "ep" + std::to_string(ep));
}

}  // namespace
}  // namespace cleave::testing::memory_plan_total_test
