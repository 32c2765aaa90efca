// Equivalence of layouts (run under mpiexec): the tiny GPT trained under pipeline and data parallelism
// gives the same per-step losses and final parameters as one rank from the same seed. The single-rank
// reference runs inside rank 0 on a communicator of its own, so both runs see the same build and data.
//
// The runs use SGD with momentum: AdamW divides each gradient by its own running RMS, so gradients that
// are pure rounding noise (the attention key bias has an exactly-zero true gradient) turn last-bit
// differences into lr-sized updates, and parameters stop being comparable even when every step is right.
//
// Tolerances:
//  - Untied pipeline splits in deterministic mode and without clipping are bit-identical: every
//    micro-batch runs the same kernels on the same shapes and every rank accumulates its micro-batches'
//    gradients in the single rank's order (1F1B and its zero-bubble variants finish backwards in
//    micro-batch order; so do zb_h2, dualpipev and auto).
//  - Data parallel is within rounding, not bit-identical yet: the rank-ordered sum of replica gradients
//    should equal the single rank's accumulation exactly (power-of-two dp, no accumulation), but gradients
//    differ in the last bit (seen in zero-initialised biases after one step); the cause is not found.
//  - Otherwise sums associate differently: GPipe finishes backwards in reverse order, a tied table split
//    over two ranks sums its two copies' gradients once instead of interleaving them, accumulation inside
//    dp replicas groups micro-batches, clipping reduces the norm across ranks. Differences stay at float
//    rounding: observed <= 6e-7 relative after 6 steps; the bound is 5e-6. Losses are reported through a
//    float reduction, so even identical runs agree only to ~1e-7 in the printed loss of dp layouts.
//  - Tensor parallel layouts split GEMM inner sums across ranks: bound 2e-5 (observed <= 5.2e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "mpi/mpi_test_env.hpp"
#include "pipeline/action.hpp"
#include "pipeline/timeline.hpp"
#include "support/layout_compare.hpp"
#include "support/layout_overrides.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::pipeline_equivalence_test {
namespace {

// A case and its tolerance: 0 bit-identical, else relative (support/layout_compare.hpp's Bound).
struct Layout {
  std::string name;
  std::vector<std::string> overrides;
  double tolerance;
  operator LayoutCase() const {
    return {name, overrides, tolerance == 0 ? Bound::bit_exact() : Bound::relative(tolerance)};
  }
};

std::vector<Layout> layouts_for(int world) {
  // kRounding and kTensorParallel: support/layout_overrides.hpp (the tp layouts observed <= 5.2e-6 here).
  std::vector<Layout> out;
  const std::string untied = "model.tie_embeddings=false";
  if (world == 2) {
    for (const char* name : {"1f1b", "interleaved_1f1b", "zb_h1", "zb_v"}) {
      out.push_back({std::string("pp2_") + name + "_untied", {pp(2), schedule(name), untied}, 0});
      out.push_back({std::string("pp2_") + name + "_tied", {pp(2), schedule(name)}, kRounding});
    }
    for (const char* name : {"zb_h2", "dualpipev", "auto"}) {
      out.push_back({std::string("pp2_") + name + "_untied", {pp(2), schedule(name), untied}, 0});
      out.push_back({std::string("pp2_") + name + "_tied", {pp(2), schedule(name)}, kRounding});
    }
    out.push_back(
        {"pp2_auto_memory3_untied", {pp(2), schedule("auto"), "parallel.auto_schedule_memory_limit=3", untied}, 0});
    // The zero-bubble paper's memory accounting (a stash lighter after its I) and its span objective.
    out.push_back({"pp2_auto_paper_memory_untied",
                   {pp(2), schedule("auto"), "parallel.auto_schedule_memory_limit=2",
                    "parallel.auto_schedule_weight_stash_fraction=0.3", "parallel.auto_schedule_objective=\"span\"",
                    untied},
                   0});
    out.push_back({"pp2_gpipe_untied", {pp(2), schedule("gpipe"), untied}, kRounding});
    out.push_back({"pp2_1f1b_clipped", {pp(2), "optimizer.grad_clip=0.05"}, kRounding});
    out.push_back({"dp2_untied", {"batch.micro_batch_size=4", untied}, kRounding});
    out.push_back({"dp2_tied", {"batch.micro_batch_size=4"}, kRounding});
    out.push_back({"dp2_accumulate", {"batch.micro_batch_size=2"}, kRounding});
    out.push_back({"tp2_tied", {tp(2)}, kTensorParallel});
    out.push_back({"tp2_untied", {tp(2), untied}, kTensorParallel});
  } else if (world == 4) {
    for (const char* name : {"1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v", "dualpipev", "auto"}) {
      out.push_back({std::string("pp4_") + name + "_untied", {pp(4), schedule(name), untied}, 0});
    }
    for (const char* name : {"zb_h2", "dualpipev", "auto"}) {
      out.push_back({std::string("pp4_") + name + "_tied", {pp(4), schedule(name)}, kRounding});
      out.push_back({std::string("dp2_pp2_") + name, {pp(2), schedule(name), "batch.micro_batch_size=1"}, kRounding});
    }
    out.push_back({"pp4_zb_v_tied", {pp(4), schedule("zb_v")}, kRounding});
    out.push_back({"pp4_gpipe_tied", {pp(4), schedule("gpipe")}, kRounding});
    out.push_back({"dp4_untied", {"batch.micro_batch_size=2", untied}, kRounding});
    out.push_back({"dp2_pp2_1f1b", {pp(2), "batch.micro_batch_size=1"}, kRounding});
    out.push_back({"dp2_pp2_zb_v_clipped", {pp(2), schedule("zb_v"), "optimizer.grad_clip=0.05"}, kRounding});
    out.push_back({"tp4", {tp(4)}, kTensorParallel});
    out.push_back({"tp2_pp2_interleaved", {tp(2), pp(2), schedule("interleaved_1f1b")}, kTensorParallel});
    out.push_back({"tp2_pp2_zb_v", {tp(2), pp(2), schedule("zb_v")}, kTensorParallel});
  } else if (world == 8) {
    out.push_back({"dp2_pp2_tp2_tied", {tp(2), pp(2), "batch.micro_batch_size=2"}, kTensorParallel});
    out.push_back({"dp2_pp2_tp2_untied", {tp(2), pp(2), "batch.micro_batch_size=2", untied}, kTensorParallel});
    out.push_back({"dp2_pp2_tp2_zero1_clipped",
                   {tp(2), pp(2), schedule("zb_h1"), "optimizer.zero_stage=1", "optimizer.grad_clip=0.05"},
                   kTensorParallel});
    out.push_back({"dp2_pp2_tp2_zero2_clipped",
                   {tp(2), pp(2), schedule("zb_v"), "optimizer.zero_stage=2", "optimizer.grad_clip=0.05"},
                   kTensorParallel});
    out.push_back({"dp2_pp2_tp2_zero3_interleaved",
                   {tp(2), pp(2), schedule("interleaved_1f1b"), "optimizer.zero_stage=3", "optimizer.grad_clip=0.05"},
                   kTensorParallel});
  }
  return out;
}

TEST(PipelineEquivalence, EveryLayoutMatchesOneRank) {
  auto world = make_world(/*deterministic=*/true);
  const auto layouts = layouts_for(world->size());
  ASSERT_FALSE(layouts.empty()) << "no layouts for world size " << world->size();
  expect_every_layout_matches_one_rank(*world, {layouts.begin(), layouts.end()}, tiny_gpt, "layout", 22, {},
                                       expect_reference_trained);
}

}  // namespace
}  // namespace cleave::testing::pipeline_equivalence_test

namespace cleave::testing::pipeline_equivalence_test {
namespace {

// Peak activation memory follows the schedule (docs/architecture.md): with p = 4 and m = 8, GPipe keeps all 8
// micro-batches' stashes alive on every rank while 1F1B's rank 0 keeps at most p = 4, so rank 0's
// measured activation peak under GPipe is about twice 1F1B's. The allocator's kActivations counter is the
// measurement; boundary buffers in flight make the ratio a little less than m / p.
TEST(PipelineMemory, OneFOneBHoldsAtMostPMicrobatchesOnTheFirstRank) {
  auto world = make_world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  std::vector<std::int64_t> peak;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    auto config = config::parse_config(R"({
      "model": {"type": "gpt", "vocab_size": 64, "d_model": 64, "n_layers": 6, "n_heads": 4, "seq_len": 32},
      "parallel": {"pipeline_model_parallel_size": 4},
      "batch": {"global_batch_size": 16, "micro_batch_size": 2},
      "train": {"steps": 2, "eval_batches": 0},
      "data": {"type": "synthetic"}
    })", "memory", {std::string("parallel.schedule=") + schedule});
    train::Trainer trainer(config, *world);
    trainer.step(0);
    trainer.reset_peak_memory();
    trainer.step(1);
    peak.push_back(trainer.memory_stats().peak_of(MemoryCategory::kActivations));
  }
  if (world->rank() == 0) {
    const double ratio = static_cast<double>(peak[0]) / static_cast<double>(peak[1]);
    std::printf("[ memory ] rank 0 activation peak: gpipe %lld B, 1f1b %lld B, ratio %.2f (m/p = 2)\n",
                static_cast<long long>(peak[0]), static_cast<long long>(peak[1]), ratio);
    EXPECT_GT(ratio, 1.6);
    EXPECT_LT(ratio, 2.2);
  }
}

// A sent boundary tensor is freed when its send completes, not at the end of the step: under 1F1B a rank's
// activation peak does not grow with the number of micro-batches (the executor had kept every sent tensor to
// the step's end: one boundary tensor per micro-batch and direction), and every rank's whole peak stays within
// 5% of the memory plan (the plan's activations do not count the gradients a block's backward holds while it
// runs, GELU's input and output gradients: 2 x T x d_ff per sample, up to 15% of a small stage's activations).
TEST(PipelineMemory, SentTensorsAreFreedWhenTheirSendCompletes) {
  auto world = make_world();
  const int p = world->size();
  if (p < 2) GTEST_SKIP() << "needs 2 or more ranks";  // pp = the world: the pp rank is the world rank
  std::vector<std::int64_t> peak, planned, peak_total, planned_total;
  for (int microbatches : {4 * p, 16 * p}) {
    auto config = config::parse_config(R"({
      "model": {"type": "gpt", "vocab_size": 64, "d_model": 64, "n_layers": 6, "n_heads": 4, "seq_len": 32},
      "parallel": {"schedule": "1f1b"},
      "batch": {"micro_batch_size": 1},
      "train": {"steps": 2, "eval_batches": 0},
      "data": {"type": "synthetic"}
    })", "memory", {"parallel.pipeline_model_parallel_size=" + std::to_string(p),
                    "batch.global_batch_size=" + std::to_string(microbatches)});
    train::Trainer trainer(config, *world);
    trainer.step(0);
    trainer.reset_peak_memory();
    trainer.step(1);
    peak.push_back(trainer.memory_stats().peak_of(MemoryCategory::kActivations));
    peak_total.push_back(trainer.memory_stats().peak_total);
    const run_plan::MemoryPlan plan = run_plan::estimate_rank_memory(trainer.plan(), trainer.config(), world->rank());
    planned.push_back(plan.bytes[static_cast<std::size_t>(MemoryCategory::kActivations)]);
    planned_total.push_back(plan.total());
  }
  std::printf("[ memory ] rank %d activation peak: %lld B with %d micro-batches, %lld B with %d (planned %lld B)\n",
              world->rank(), static_cast<long long>(peak[0]), 4 * p, static_cast<long long>(peak[1]), 16 * p,
              static_cast<long long>(planned[1]));
  // A send still in flight when the peak is reached holds its tensor, up to one per micro-batch the rank holds
  // (p on rank 0 under 1F1B): allow p boundary tensors (32 x 64 x 4 B each) where keeping every sent tensor
  // would add one per extra micro-batch (12p).
  EXPECT_LE(peak[1], peak[0] + p * 32 * 64 * 4) << "rank " << world->rank();
  // A stage of an 8th of the model (np8: rank 0 holds only the embedding, ~160 KB in all) is decided by how many
  // sends are unfinished at the peak, which depends on timing: the plan allows 2 + p boundary tensors (32 x 64
  // x 4 B), as slack there.
  EXPECT_NEAR(static_cast<double>(planned_total[1]), static_cast<double>(peak_total[1]),
              std::max(0.05 * static_cast<double>(peak_total[1]), (2.0 + p) * 32 * 64 * 4))
      << "rank " << world->rank() << ": planned " << planned_total[1] << " B, measured " << peak_total[1] << " B";
}

}  // namespace
}  // namespace cleave::testing::pipeline_equivalence_test

namespace cleave::testing::pipeline_equivalence_test {
namespace {

// The measured timeline (train.trace) holds every action of each rank's lowered schedule, in schedule order,
// REDUCE_GRAD and OPTIMIZER_STEP included, with spans that never overlap on a rank: a compute action's span
// starts only once its input has arrived (the wait is idle, not compute), so the spans' sum is the rank's busy
// time and the gaps are its bubble.
TEST(PipelineTrace, MeasuredTimelineHoldsEveryActionInScheduleOrder) {
  auto world = make_world();
  if (world->size() != 2 && world->size() != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const char* schedule : {"gpipe", "1f1b", "zb_v", "zb_h2", "dualpipev"}) {
    SCOPED_TRACE(schedule);
    auto config = tiny_gpt({"parallel.pipeline_model_parallel_size=" + std::to_string(world->size()),
                            std::string("parallel.schedule=") + schedule, "train.trace=true", "train.steps=2"});
    train::Trainer trainer(config, *world);
    trainer.step(0);
    trainer.step(1);
    const pipeline::Timeline timeline = trainer.measured_timeline();
    if (world->rank() != 0) continue;
    const auto& plan = trainer.plan();
    ASSERT_EQ(timeline.ranks.size(), static_cast<std::size_t>(plan.schedule.pp_size));
    for (int r = 0; r < plan.schedule.pp_size; ++r) {
      const auto& actions = plan.schedule.ranks[static_cast<std::size_t>(r)];
      const auto& measured = timeline.ranks[static_cast<std::size_t>(r)];
      ASSERT_EQ(measured.size(), actions.size()) << "rank " << r;
      double previous_end = -1e300, busy = 0;
      for (std::size_t i = 0; i < actions.size(); ++i) {
        EXPECT_EQ(pipeline::format_action(measured[i].action), pipeline::format_action(actions[i]))
            << "rank " << r << " action " << i;
        EXPECT_LE(measured[i].start, measured[i].end);
        EXPECT_GE(measured[i].start, previous_end) << "rank " << r << " action " << i << " overlaps the previous one";
        previous_end = measured[i].end;
        busy += measured[i].end - measured[i].start;
      }
      EXPECT_GT(busy, 0.0);
      EXPECT_LE(busy, measured.back().end - measured.front().start + 1e-9);
    }
  }
}

}  // namespace
}  // namespace cleave::testing::pipeline_equivalence_test
