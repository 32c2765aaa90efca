// The memory plan at every pipeline schedule (issues 33/36: the plan within 2% of the measured peak per rank for
// every layout): under mpiexec at pp 2 (np2) and tp 2 x pp 2 (np4, with and without sequence parallelism), ZB-H2,
// interleaved 1F1B (two virtual stages), ZB-V and DualPipeV train a small GPT two steps and every rank's allocator
// high-water marks, by category and in total, are set against engine/run_plan/memory_plan.hpp's estimate for its pp
// rank. Parameters, gradients and optimizer state do not depend on the schedule: to the byte. Activations (where the
// schedules differ: how many stashes are alive, which boundary tensors are in flight) and the total: within 2%.
//
// Why 2% holds with room: the plan walks the rank's actions (engine/run_plan/activation_walk.cpp), and what it cannot
// know is when a send completes (it assumes by the test after the next compute action); measured, every rank is within
// one boundary tensor [T, D] x micro-batch 2 (f32 8 KiB; sequence parallelism 4 KiB) of the plan, two on a loaded
// machine. Sixteen layers make a boundary tensor 0.2-0.8% of a rank's activation peak, so two of them stay inside the
// bound. Measured on the 2-core development machine (activations, plan against measured): pp2 -0.95%..+0.29%, tp2 x pp2
// -0.75%..+0.54%, totals -0.20%..+0.67% (docs/planner.md). Before the plan counted the targets a rank holding the first
// and the last stage keeps between their forwards, ZB-V and DualPipeV were 512 B under on that rank.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/memory_compare.hpp"
#include "train_harness.hpp"

namespace cleave::testing::schedule_memory_test {
namespace {

// Sixteen layers: four per stage under the two-chunk schedules at pp 2, eight under ZB-H2 (see the header: one
// boundary tensor, 8 KiB, is 0.2-0.8% of a rank's activation peak).
const std::string kModel =
    R"("model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 16, "n_heads": 4, "seq_len": 32})";

// One run of `schedule` on `world` at tp = world / 2, pp 2: each category's peak against the plan (printed), the
// parameters, gradients and optimizer state to the byte, the activations and the total within 2%.
void check_schedule(comm::Communicator& world, const std::string& schedule, bool sp = false, bool bf16 = false) {
  constexpr double bound = 0.02;  // the standard (issues 33/36); why it holds with room: the header
  const std::string label = schedule + (sp ? " sp" : "") + (bf16 ? " bf16" : "");
  SCOPED_TRACE(label);
  const int tp = world.size() / 2;
  std::vector<std::string> overrides = {"parallel.schedule=" + schedule,
                                        "parallel.tensor_model_parallel_size=" + std::to_string(tp)};
  if (sp) overrides.push_back("parallel.sequence_parallel=true");
  if (bf16) overrides.push_back("device.precision=bf16");
  const config::RunConfig config = config::parse_config("{" + kModel + R"(,
    "batch": {"global_batch_size": 16, "micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "warmup_steps": 0},
    "parallel": {"pipeline_model_parallel_size": 2},
    "train": {"seed": 5, "eval_batches": 0, "steps": 2},
    "data": {"type": "synthetic"}
  })", "schedule_memory", overrides);
  const int pp_rank = world.rank() / tp;
  const PlannedAndMeasured r = train_against_plan(config, world, pp_rank);
  for (int ci = 0; ci < kNumMemoryCategories; ++ci) {
    const auto c = static_cast<MemoryCategory>(ci);
    const auto planned = static_cast<double>(r.planned_peak(c));
    const auto measured = static_cast<double>(r.measured_peak(c));
    if (planned == 0 && measured == 0) continue;
    std::printf("[ memory ] %-16s tp%d pp2 rank %d (pp rank %d) %-15s measured %8.0f B planned %8.0f B (%+.2f%%)\n",
                label.c_str(), tp, world.rank(), pp_rank, std::string(memory_category_name(c)).c_str(), measured,
                planned, measured > 0 ? 100.0 * (planned / measured - 1) : 0.0);
    // The workspace too: the attention kernel's scratch and the executor's loss scale and losses (before, the lm
    // head's logits stood in on its rank: 16,384 B planned against 10,404 measured at pp2).
    if (c == MemoryCategory::kParameters || c == MemoryCategory::kGradients ||
        c == MemoryCategory::kOptimizerState || c == MemoryCategory::kWorkspace) {
      EXPECT_EQ(planned, measured) << memory_category_name(c) << " on rank " << world.rank();
    }
  }
  const auto planned_activations = static_cast<double>(r.planned_peak(MemoryCategory::kActivations));
  const auto measured_activations = static_cast<double>(r.measured_peak(MemoryCategory::kActivations));
  const auto planned_total = static_cast<double>(r.planned.total());
  const auto measured_total = static_cast<double>(r.measured.peak_total);
  std::printf("[ memory ] %-16s tp%d pp2 rank %d total measured %8.0f B planned %8.0f B (%+.2f%%)\n", label.c_str(),
              tp, world.rank(), measured_total, planned_total,
              100.0 * (planned_total / measured_total - 1));
  EXPECT_NEAR(planned_activations, measured_activations, bound * measured_activations)
      << "activations on rank " << world.rank();
  EXPECT_NEAR(planned_total, measured_total, bound * measured_total) << "total on rank " << world.rank();
}

TEST(ScheduleMemory, EveryScheduleFollowsThePlan) {
  auto world = make_world();
  if (world->size() != 2 && world->size() != 4) GTEST_SKIP() << "runs at pp2 (2 ranks) or tp2 x pp2 (4 ranks)";
  for (const char* schedule : {"zb_h2", "interleaved_1f1b", "zb_v", "dualpipev"}) {
    check_schedule(*world, schedule);
    // tp2 x pp2 with sequence parallelism: stashes and boundary tensors one tp rank's sequence shard.
    if (world->size() == 4) check_schedule(*world, schedule, /*sp=*/true);
  }
  // bf16 at ZB-V: the rank with the first and the last stage holds the targets (i32) between their forwards, and the
  // loss keeps them in its stash; the walk halves its bytes under bf16, so both are counted twice (before, 2 B per
  // token under).
  check_schedule(*world, "zb_v", false, /*bf16=*/true);
}

}  // namespace
}  // namespace cleave::testing::schedule_memory_test
