// The memory plan's host line beyond the moe staging (run_plan/host_memory.hpp): on a GPU each micro-batch's inputs
// and targets sit in pinned memory from the F that loads them to the step's end (engine/train/trainer_impl.cpp,
// load_microbatch), and the losses row is pinned on every rank. The bytes per micro-batch against the trainer's
// own: the run's data source writing micro-batch 0 and cp_shard splitting it into a counting allocator, as
// load_microbatch does into the pinned one (held: the shard; peak: the unsharded batch beside it). The walk: every
// micro-batch on the ranks of the first and the last stage, once on a rank holding both (ZB-V), none on a middle
// rank; the losses row everywhere; with moe staging on top; on a cuda device only, dense models included.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/host_memory.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/data/cp_shard.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "partition/families/moe_staging.hpp"

namespace cleave::run_plan::memory_plan_host_batches_test {
namespace {

config::RunConfig resolved(const std::string& model, int world, const std::vector<std::string>& overrides) {
  config::RunConfig c = config::parse_config(R"({"model": )" + model + R"(,
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.05}, "data": {"type": "synthetic"}})",
                                             "<string>", overrides);
  c.resolve(world);
  return c;
}

Plan plan_of(const config::RunConfig& c) {
  return make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
}

constexpr const char* kGpt =
    R"({"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16})";

TEST(MemoryPlanHostBatches, BytesPerMicroBatchAreTheDataSourcesOwn) {
  struct Case {
    std::string model;
    int cp;
    std::string exchange;
  };
  const std::vector<Case> cases = {
      {kGpt, 1, "ring"},
      {kGpt, 2, "ring"},
      {kGpt, 2, "all_to_all"},
      {R"({"type": "llama", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
           "seq_len": 16, "ffn_hidden_size": 64})", 2, "ring"},
      {R"({"type": "mlp", "in_features": 12, "hidden": [16], "num_classes": 5})", 1, "ring"},
      {R"({"type": "cnn", "in_channels": 1, "height": 8, "width": 8, "channels": [4], "kernel": 3, "num_classes": 3})", 1, "ring"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.model + " cp" + std::to_string(k.cp) + " " + k.exchange);
    const config::RunConfig c = resolved(k.model, k.cp,
                                         {"parallel.context_parallel_size=" + std::to_string(k.cp),
                                          "parallel.context_parallel_comm=" + k.exchange});
    const Plan plan = plan_of(c);
    const auto source = train::make_data_source(c, train::Split::kTrain);
    train::BatchLayout layout;
    layout.global_batch_size = 8;
    layout.micro_batch_size = 2;
    const layers::CpLayout cp{k.cp, 0,
                              k.exchange == "ring" ? layers::CpExchange::kRing : layers::CpExchange::kAllToAll};
    const std::unique_ptr<Allocator> pinned = make_cpu_allocator();  // counts what load_microbatch pins
    const train::Batch b = train::cp_shard(source->next_batch(0, 0, layout, *pinned), cp, *pinned);
    EXPECT_EQ(pinned->stats().current_total, microbatch_upload_bytes(plan.spec, 2, k.cp));
    EXPECT_EQ(pinned->stats().peak_total,
              microbatch_upload_bytes(plan.spec, 2, k.cp) + (k.cp > 1 ? microbatch_upload_bytes(plan.spec, 2, 1) : 0));
  }
}

TEST(MemoryPlanHostBatches, EveryMicroBatchToTheStepsEndOnTheFirstAndLastStagesAndTheLossesRow) {
  // 4 micro-batches of 2 sequences of 16 tokens: i32 inputs and targets, 256 B each; the losses row 4 f32.
  const std::int64_t batch = 2 * 16 * (4 + 4), losses = 4 * 4;
  EXPECT_EQ(microbatch_upload_bytes(plan_of(resolved(kGpt, 1, {})).spec, 2, 1), batch);
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const config::RunConfig one = resolved(kGpt, 1, {std::string("parallel.schedule=") + schedule});
    EXPECT_EQ(host_pinned_peak(plan_of(one), one, 0), 4 * batch + losses) << schedule;
    EXPECT_EQ(moe_staging_peak(plan_of(one), one, 0), 0) << schedule;
  }
  // pp3: the first and the last rank load every micro-batch, the middle one none; each has the losses row.
  const config::RunConfig pp3 = resolved(kGpt, 3, {"parallel.pipeline_model_parallel_size=3", "parallel.schedule=1f1b"});
  const Plan p3 = plan_of(pp3);
  EXPECT_EQ(host_pinned_peak(p3, pp3, 0), 4 * batch + losses);
  EXPECT_EQ(host_pinned_peak(p3, pp3, 1), losses);
  EXPECT_EQ(host_pinned_peak(p3, pp3, 2), 4 * batch + losses);
  // ZB-V at pp2: rank 0 holds the first and the last stage, one load serves both.
  const config::RunConfig zbv = resolved(kGpt, 2, {"parallel.pipeline_model_parallel_size=2", "parallel.schedule=zb_v"});
  const Plan pv = plan_of(zbv);
  ASSERT_EQ(pv.stage_to_rank(0), 0);
  ASSERT_EQ(pv.stage_to_rank(pv.num_stages() - 1), 0);
  EXPECT_EQ(host_pinned_peak(pv, zbv, 0), 4 * batch + losses);
  EXPECT_EQ(host_pinned_peak(pv, zbv, 1), losses);
  // cp2: each rank keeps its halves; the last load has the unsharded batch beside them; a row per cp rank.
  const config::RunConfig cp2 = resolved(kGpt, 2, {"parallel.context_parallel_size=2"});
  EXPECT_EQ(host_pinned_peak(plan_of(cp2), cp2, 0), 4 * batch / 2 + batch + 2 * losses);
  // dp2: 2 micro-batches per replica, the losses row still every global micro-batch's.
  const config::RunConfig dp2 = resolved(kGpt, 2, {});
  EXPECT_EQ(host_pinned_peak(plan_of(dp2), dp2, 0), 2 * batch + losses);
}

TEST(MemoryPlanHostBatches, MoeStagingOnTopAndACudaDeviceOnly) {
  const std::string moe = R"({"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 4,
                              "seq_len": 16, "n_experts": 4, "top_k": 2})";
  const std::int64_t batch = 2 * 16 * 8, losses = 16, uploads = 16 * 2 * 16 * 2;  // per block: 16 · n · k
  // GPipe: every micro-batch's batch and its three blocks' uploads at the last forward; 1F1B on one rank: the
  // batches so far and one micro-batch's uploads.
  config::RunConfig gpipe = resolved(moe, 1, {"parallel.schedule=gpipe"});
  EXPECT_EQ(host_pinned_peak(plan_of(gpipe), gpipe, 0), 4 * batch + 4 * 3 * uploads + losses);
  const config::RunConfig f1b = resolved(moe, 1, {"parallel.schedule=1f1b"});
  EXPECT_EQ(host_pinned_peak(plan_of(f1b), f1b, 0), 4 * batch + 3 * uploads + losses);
  // The memory plan reports it on a cuda device only, never in the total; a dense model too.
  const Plan plan = plan_of(gpipe);
  const MemoryPlan cpu = estimate_rank_memory(plan, gpipe, 0);
  EXPECT_EQ(cpu.host_pinned, 0);
  gpipe.device.type = DeviceType::kCuda;
  const MemoryPlan gpu = estimate_rank_memory(plan, gpipe, 0);
  EXPECT_EQ(gpu.host_pinned, 4 * batch + 4 * 3 * uploads + losses);
  EXPECT_EQ(gpu.total(), cpu.total());
  config::RunConfig gpt = resolved(kGpt, 1, {});
  EXPECT_EQ(estimate_rank_memory(plan_of(gpt), gpt, 0).host_pinned, 0);
  gpt.device.type = DeviceType::kCuda;
  EXPECT_EQ(estimate_rank_memory(plan_of(gpt), gpt, 0).host_pinned, 4 * batch + losses);
}

}  // namespace
}  // namespace cleave::run_plan::memory_plan_host_batches_test
