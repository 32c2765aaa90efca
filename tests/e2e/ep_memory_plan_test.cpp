// The memory plan knows expert parallelism (issue 36 part 7): at ep = world size (2 or 4; dp = ep, pp 1, GPipe so
// the stashes the plan counts dominate), every rank's measured allocator peaks against its memory plan, with the
// rank's exact imbalance from a forced routing (model.forced_routing "zipf": the rows its experts run, max over
// the steps, over the mean, computed from the workload as the oracle does) passed as ep_imbalance. Parameters,
// gradients and optimizer state (E / ep experts) to the byte; activations within 2% (measured: to the byte, less the E
// counts of 4 bytes each a micro-batch keeps). At 4 ranks also ep 2 × tp 2, under GPipe and 1F1B (one micro-batch's
// stash under the moe blocks' backward: the peak is the experts' or the combine's phase of the input gradient,
// partition/ep_costs.cpp; before they were costed apart the plan was 1.4-1.9% over under GPipe, 2.5-3.5% under 1F1B).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/memory_compare.hpp"
#include "train_harness.hpp"

namespace cleave::testing::ep_memory_plan_test {
namespace {

constexpr std::int64_t kExperts = 8, kTopK = 2, kSeq = 32, kMicro = 2, kSteps = 3;

// The rows rank r's experts run over (every source rank routes alike under forced routing), max over the steps,
// over the mean rows (micro · T · k).
double exact_imbalance(const std::string& workload, int ep, int rank) {
  return forced_routing_imbalance(workload, kExperts, kTopK, kMicro * kSeq, ep, rank, 0, kSteps);
}

// One run at ep × tp on `world` (dp = world / tp = ep): every category of this rank's peak against its plan.
void check_plan(comm::Communicator& world, int ep, int tp, const std::string& schedule = "gpipe") {
  const std::string workload = "zipf";
  const int dp = world.size() / tp;
  const config::RunConfig config = config::parse_config(R"({
    "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 32,
              "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2, "forced_routing": "zipf"},
    "batch": {"micro_batch_size": 2},
    "optimizer": {"type": "adamw", "lr": 0.001, "warmup_steps": 0},
    "train": {"seed": 5, "eval_batches": 0, "steps": 3},
    "data": {"type": "synthetic"}
  })", "ep_memory", {"parallel.schedule=" + schedule,"parallel.expert_model_parallel_size=" + std::to_string(ep),
                     "parallel.tensor_model_parallel_size=" + std::to_string(tp),
                     "batch.global_batch_size=" + std::to_string(2 * kMicro * dp)});
  train::Trainer trainer(config, world);
  for (std::int64_t s = 0; s < config.train.steps; ++s) trainer.step(s);
  config::RunConfig resolved = config;
  resolved.resolve(world.size());
  const int ep_rank = (world.rank() / tp) % ep;  // dp × cp index mod ep (process_grid.hpp), cp 1
  const double imbalance = exact_imbalance(workload, ep, ep_rank);
  const run_plan::MemoryPlan plan = run_plan::estimate_rank_memory(trainer.plan(), resolved, 0, imbalance);
  const auto& stats = trainer.memory_stats();
  for (const MemoryCategory c : {MemoryCategory::kParameters, MemoryCategory::kGradients,
                                 MemoryCategory::kOptimizerState, MemoryCategory::kActivations}) {
    const auto planned = static_cast<double>(plan.bytes[static_cast<std::size_t>(c)]);
    const auto measured = static_cast<double>(stats.peak_of(c));
    std::printf("[ memory ] ep%d tp%d %s rank %d (imbalance %.3f) %s: measured %.0f B planned %.0f B (%+.2f%%)\n", ep,
                tp, schedule.c_str(), world.rank(), imbalance, std::string(memory_category_name(c)).c_str(), measured,
                planned,
                100.0 * (planned / measured - 1));
    EXPECT_GT(measured, 0) << memory_category_name(c);
    EXPECT_NEAR(planned, measured, 0.02 * measured) << memory_category_name(c) << " on rank " << world.rank();
    // Parameters, gradients and optimizer state to the byte, at tp 2 too: the replicated parameters (norms, the
    // router) whole on every tp rank (1.1% under when the plan divided them by tp as well).
    if (c != MemoryCategory::kActivations) {
      EXPECT_EQ(planned, measured) << memory_category_name(c);
    }
  }
}

TEST(ExpertParallel, MemoryPlanFollowsTheMeasuredPeak) {
  auto world = make_world();
  const int ep = world->size();
  if (ep != 2 && ep != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  check_plan(*world, ep, 1);
}

// ep 2 × tp 2 on 4 ranks: each rank holds E / ep experts, each split over tp (parameters, gradients and state
// E / ep / tp of the experts' bytes), and runs its F / tp of the rows its ep rank receives.
TEST(ExpertParallel, MemoryPlanFollowsTheMeasuredPeakAtEpTimesTp) {
  auto world = make_world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  check_plan(*world, 2, 2);
  check_plan(*world, 2, 2, "1f1b");
}

// ZeRO-2 and 3 with ep (engine/train/data_parallel.hpp), reduced per step and per micro-batch (the experts' buckets
// per step either way): at np 4, ep 2 inside dp 4 (two expert-dp groups of 2, so the experts really are sharded),
// balanced routing ("uniform": imbalance 1 on every rank, as forced_routing's round
// robin gives), 1F1B: the measured peaks of parameters, gradients and optimizer state against the memory plan, which
// counts each moe block's E / ep experts as a unit sharded over expert-dp and the rest over dp. Parameters and
// optimizer state within 2% (measured: to the byte). Gradients: when a bucket is traded for its shard depends on when
// a later mark_ready finds its collective done, so the expert-dp bucketer's first trade may come before or after the
// others have freed memory; the plan takes the worst case, so the measured peak must lie between the plan less one
// expert shard (and 2% for padding) and the plan (measured: both ends, run to run).
TEST(ExpertParallel, MemoryPlanFollowsTheMeasuredPeakUnderZero) {
  auto world = make_world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const auto& [zero, reduce] : std::vector<std::pair<int, std::string>>{
           {2, "per_step"}, {3, "per_step"}, {2, "per_microbatch"}, {3, "per_microbatch"}}) {
    SCOPED_TRACE("zero " + std::to_string(zero) + " " + reduce);
    const config::RunConfig config = config::parse_config(R"({
      "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 32,
                "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2, "forced_routing": "uniform"},
      "batch": {"micro_batch_size": 2, "global_batch_size": 16},
      "optimizer": {"type": "adamw", "lr": 0.001, "warmup_steps": 0},
      "train": {"seed": 5, "eval_batches": 0, "steps": 3},
      "data": {"type": "synthetic"}
    })", "ep_zero_memory", {"parallel.expert_model_parallel_size=2", "optimizer.zero_stage=" + std::to_string(zero),
                            "optimizer.zero_reduce=" + reduce});
    train::Trainer trainer(config, *world);
    trainer.step(0);
    trainer.reset_peak_memory();  // the steady state, as ZeroMemory (dp_zero_memory_test.cpp) measures it
    for (std::int64_t s = 1; s < config.train.steps; ++s) trainer.step(s);
    config::RunConfig resolved = config;
    resolved.resolve(4);
    const run_plan::MemoryPlan plan = run_plan::estimate_rank_memory(trainer.plan(), resolved, 0, 1.0);
    const auto& stats = trainer.memory_stats();
    for (const MemoryCategory c : {MemoryCategory::kParameters, MemoryCategory::kGradients,
                                   MemoryCategory::kOptimizerState}) {
      const auto planned = static_cast<double>(plan.bytes[static_cast<std::size_t>(c)]);
      const auto measured = static_cast<double>(stats.peak_of(c));
      if (world->rank() == 0) {
        std::printf("[ memory ] ZeRO-%d %s ep2 dp4 rank 0 %s: measured %.0f B planned %.0f B (%+.2f%%)\n", zero,
                    reduce.c_str(), std::string(memory_category_name(c)).c_str(), measured, planned, 100.0 * (planned / measured - 1));
      }
      EXPECT_GT(measured, 0) << memory_category_name(c);
      if (c != MemoryCategory::kGradients) {
        EXPECT_NEAR(planned, measured, 0.02 * measured) << memory_category_name(c) << " on rank " << world->rank();
        continue;
      }
      // One expert shard, f32: this rank's 4 of 8 experts (3 · D 32 · F 64 each) over expert-dp 2, both blocks' in
      // ZeRO-2's one bucket, one block's per ZeRO-3 unit.
      const double expert_shard = 4.0 * 3 * 32 * 64 * 4 / 2 * (zero == 2 ? 2 : 1);
      EXPECT_LE(measured, planned * 1.001) << "gradients on rank " << world->rank();
      EXPECT_GE(measured, planned - expert_shard - 0.02 * planned) << "gradients on rank " << world->rank();
    }
  }
}

}  // namespace
}  // namespace cleave::testing::ep_memory_plan_test
