// The memory plan's host line's moe part (run_plan::moe_staging_peak; MemoryPlan::host_pinned adds the staged
// micro-batches and the losses row, MemoryPlanHostBatches.*): the moe blocks' page-locked routing staging on a GPU,
// per micro-batch in flight on the rank, by hand from partition/families/moe_staging.hpp's formula
// (whose bytes MoeMlp.UploadStagingIsThePlansFormula checks against the layer's own requests): GPipe holds every
// micro-batch, 1F1B at pp2 two on the first rank and one on the last, full recomputation one block's inside its
// rerun; cp adds the balance row, ep the count exchange's transient (alone, together, under GPipe and full
// recomputation); nothing on the CPU or for a dense model. The same walk against the layers' own staging under cp
// and ep: MoeStaging.TheWalkIsTheLayersPeak (tests/mpi/moe_staging_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/run_plan/host_memory.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan::memory_plan_host_test {
namespace {

// 3 moe blocks, T 16, E 4, k 2, micro-batch 2, 4 micro-batches.
config::RunConfig moe_at(int world, const std::vector<std::string>& overrides) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 4, "seq_len": 16,
              "n_experts": 4, "top_k": 2},
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.05}, "data": {"type": "synthetic"}})",
                                             "<string>", overrides);
  c.resolve(world);
  return c;
}

std::int64_t pinned(const config::RunConfig& c, int pp_rank = 0) {
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
  return moe_staging_peak(plan, c, pp_rank);
}

// Per block and micro-batch: 16 · n · k, n = 2 · 16 / cp tokens.
constexpr std::int64_t kUploads = 16 * 2 * 16 * 2;

TEST(MemoryPlanHost, MoeStagingPerMicroBatchInFlight) {
  // GPipe on one rank: all 4 micro-batches' forwards before the first backward, 3 blocks each.
  EXPECT_EQ(pinned(moe_at(1, {"parallel.schedule=gpipe"})), 4 * 3 * kUploads);
  // 1F1B on one rank: one micro-batch at a time.
  EXPECT_EQ(pinned(moe_at(1, {"parallel.schedule=1f1b"})), 3 * kUploads);
  // 1F1B at pp2: the first rank holds two micro-batches of its blocks, the last one; which blocks each stage has
  // comes from the partition, so the figure is checked against the per-block bytes times the micro-batches.
  const config::RunConfig pp2 = moe_at(2, {"parallel.schedule=1f1b", "parallel.pipeline_model_parallel_size=2"});
  const Plan plan = make_plan(pp2, 4, 0);
  std::vector<std::int64_t> moe_blocks(2, 0);
  for (int stage = 0; stage < 2; ++stage) {
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.begin; b < range.end; ++b) {
      moe_blocks[static_cast<std::size_t>(stage)] +=
          plan.spec.blocks[static_cast<std::size_t>(b)].kind == partition::BlockKind::kMoeBlock;
    }
  }
  EXPECT_EQ(moe_blocks[0] + moe_blocks[1], 3);
  EXPECT_EQ(pinned(pp2, 0), 2 * moe_blocks[0] * kUploads);
  EXPECT_EQ(pinned(pp2, 1), moe_blocks[1] * kUploads);
  // Full recomputation: the first forward waits for its uploads at once; the rerun holds one block's.
  EXPECT_EQ(pinned(moe_at(1, {"parallel.schedule=gpipe", "train.recompute=full"})), kUploads);
}

TEST(MemoryPlanHost, CpAddsTheBalanceRowAndEpTheCountExchange) {
  // cp2: n halves; the load-balancing loss (on by default) adds 8 · micro · (E + 1) per block and micro-batch.
  const std::int64_t held = kUploads / 2 + 8 * 2 * 5;
  EXPECT_EQ(pinned(moe_at(2, {"parallel.schedule=1f1b", "parallel.context_parallel_size=2"})), 3 * held);
  EXPECT_EQ(pinned(moe_at(2, {"parallel.schedule=1f1b", "parallel.context_parallel_size=2", "model.aux_loss_coef=0"})),
            3 * kUploads / 2);
  // ep2: 8 · E of counts while the last block's forward dispatches, on top of the three blocks' uploads.
  EXPECT_EQ(pinned(moe_at(2, {"parallel.schedule=1f1b", "parallel.expert_model_parallel_size=2"})),
            3 * kUploads + 8 * 4);
  // Under full recomputation the rerun holds its uploads while it dispatches.
  EXPECT_EQ(pinned(moe_at(2, {"parallel.schedule=1f1b", "parallel.expert_model_parallel_size=2",
                              "train.recompute=full"})),
            kUploads + 8 * 4);
}

TEST(MemoryPlanHost, CpAndEpTogetherUnderGpipeAndFullRecomputation) {
  // cp2 × ep2 on 2 ranks (dp 1, 4 micro-batches): GPipe holds every micro-batch's tables and count rows, the last
  // block's ep counts on top while it dispatches.
  const std::int64_t held = kUploads / 2 + 8 * 2 * 5;
  const std::vector<std::string> cp_ep = {"parallel.context_parallel_size=2", "parallel.expert_model_parallel_size=2"};
  auto with = [&](std::vector<std::string> o, const std::string& more) {
    o.push_back(more);
    return o;
  };
  EXPECT_EQ(pinned(moe_at(2, with(cp_ep, "parallel.schedule=gpipe"))), 4 * 3 * held + 8 * 4);
  EXPECT_EQ(pinned(moe_at(2, with(cp_ep, "parallel.schedule=1f1b"))), 3 * held + 8 * 4);
  // Full recomputation: the rerun inside one block's backward holds its tables, its count row and its ep counts
  // (the first forward's transient, the larger of its tables and the counts, is below).
  EXPECT_EQ(pinned(moe_at(2, with(with(cp_ep, "parallel.schedule=gpipe"), "train.recompute=full"))), held + 8 * 4);
  EXPECT_EQ(pinned(moe_at(2, {"parallel.schedule=1f1b", "parallel.context_parallel_size=2", "train.recompute=full"})),
            held);
  // ep2 alone on 2 ranks is dp 2: 2 micro-batches per replica, GPipe holds both.
  EXPECT_EQ(pinned(moe_at(2, {"parallel.schedule=gpipe", "parallel.expert_model_parallel_size=2"})),
            2 * 3 * kUploads + 8 * 4);
}

TEST(MemoryPlanHost, ReportedOnACudaDeviceOnlyAndNotInTheTotal) {
  config::RunConfig c = moe_at(1, {"parallel.schedule=gpipe"});
  const Plan plan = make_plan(c, 4, 0);
  const MemoryPlan cpu = estimate_rank_memory(plan, c, 0);
  EXPECT_EQ(cpu.host_pinned, 0);  // the CPU stages nothing
  c.device.type = DeviceType::kCuda;
  const MemoryPlan gpu = estimate_rank_memory(plan, c, 0);
  // With every micro-batch's staged batch (2 · 16 · 8 B) and the losses row (4 f32): MemoryPlanHostBatches.*.
  EXPECT_EQ(gpu.host_pinned, 4 * 3 * kUploads + 4 * 2 * 16 * 8 + 4 * 4);
  EXPECT_EQ(gpu.total(), cpu.total());
  EXPECT_NE(gpu.breakdown().find("host pinned"), std::string::npos) << gpu.breakdown();
  // A dense model stages nothing.
  config::RunConfig gpt = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 2}, "data": {"type": "synthetic"}})",
                                               "<string>", {});
  gpt.resolve(1);
  EXPECT_EQ(moe_staging_peak(make_plan(gpt, 4, 0), gpt, 0), 0);
}

}  // namespace
}  // namespace cleave::run_plan::memory_plan_host_test
