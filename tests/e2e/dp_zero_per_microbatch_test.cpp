// ZeRO-2 and 3 reduced per micro-batch (optimizer.zero_reduce per_microbatch, outside deterministic mode; part of
// e2e_data_parallel_test, see dp_equivalence_test.cpp).
//
// What it asserts: they match plain data parallel to float rounding at dp2, dp4 and dp2 x pp2 (tied table split or
// shared, ZB-V, interleaved, ZB-H1), dp2 x tp2 and a bf16 wire; their collectives carry a step's bytes per
// micro-batch; the gradient peak is ZeRO-0's / dp plus two buckets (and the tied table), the memory plan's within
// 2%; deterministic mode's auto reduces per step (the bit-identical form of dp_equivalence_test.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dp_test_support.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::dp_zero_per_microbatch_test {
namespace {

// optimizer.zero_reduce per_microbatch (ZeRO-2 and 3 outside deterministic mode): each bucket is reduce-scattered
// in every micro-batch and only this rank's shard accumulated. The sum is the same up to its order (the replicas'
// micro-batch-0 sum, plus micro-batch 1's, ... instead of each replica's micro-batches first), so against ZeRO-0
// (plain data parallel, same layout, the same non-deterministic mode) losses, gradient norms and parameters agree
// within float rounding (kRounding, element-wise, with SGD: AdamW turns rounding noise in near-zero gradients
// into lr-sized steps; a bf16 wire rounds every micro-batch's bucket instead of the step's sum, each rounding up
// to 2^-9 relative: 2e-2 after 6 steps, parameters against each tensor's largest element); and the collectives carried one step's bytes per micro-batch (StepStats::dp_grad_bytes, fp32 wire;
// ZeRO-2's buckets are packed differently per micro-batch: within 2%),
// so the per-micro-batch path ran. In deterministic mode `auto` reduces per step (ZeroSharded, bit for bit):
// the same dp_grad_bytes as per_step.
struct MicrobatchLayout {
  std::string name;
  std::vector<std::string> overrides;
  double tolerance = kRounding;
};

std::vector<MicrobatchLayout> per_microbatch_layouts(int world) {
  const std::string clip = "optimizer.grad_clip=0.05";
  if (world == 2) {
    return {{"dp2_accumulate_4_tiny_buckets", {"batch.micro_batch_size=1", kTinyBuckets}},
            {"dp2_clipped_one_bucket", {"batch.micro_batch_size=2", clip}},
            {"dp2_untied_tiny_buckets", {"batch.micro_batch_size=1", "model.tie_embeddings=false", kTinyBuckets}},
            {"dp2_bf16_wire", {"batch.micro_batch_size=1", kTinyBuckets, "parallel.grad_reduce_dtype=bf16"}, 2e-2}};
  }
  if (world == 4) {
    return {{"dp4_accumulate_tiny_buckets", {"batch.micro_batch_size=1", kTinyBuckets}},
            {"dp2_pp2_tied_split", {pp(2), kTinyBuckets, clip}},
            {"dp2_pp2_zb_v_tied_shared", {pp(2), "parallel.schedule=zb_v", kTinyBuckets}},
            {"dp2_pp2_interleaved", {pp(2), "parallel.schedule=interleaved_1f1b", kTinyBuckets}},
            {"dp2_pp2_zb_h1_recompute", {pp(2), "parallel.schedule=zb_h1", "train.recompute=full"}},
            {"dp2_tp2", {"parallel.tensor_model_parallel_size=2", kTinyBuckets}}};
  }
  return {};
}

struct StepRecord {
  RunRecord run;
  std::vector<std::int64_t> dp_bytes;
};

StepRecord train_recording_bytes(const config::RunConfig& config, comm::Communicator& world) {
  train::Trainer trainer(config, world);
  StepRecord record;
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    const auto stats = trainer.step(s);
    record.run.losses.push_back(stats.loss);
    record.run.grad_norms.push_back(stats.grad_norm);
    record.dp_bytes.push_back(stats.dp_grad_bytes);
  }
  record.run.params = trainer.gather_parameters();
  return record;
}

TEST(ZeroPerMicrobatch, MatchesPlainDataParallelWithinRounding) {
  auto world = make_world();
  const auto layouts = per_microbatch_layouts(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no layouts for world size " << world->size();
  for (const auto& layout : layouts) {
    auto config = tiny_gpt(layout.overrides);
    config.train.deterministic = false;
    const StepRecord plain = train_recording_bytes(config, *world);
    EXPECT_LT(plain.run.losses.back(), plain.run.losses.front());
    for (int stage : {2, 3}) {
      SCOPED_TRACE(layout.name + " zero_stage " + std::to_string(stage));
      config.optimizer.zero_stage = stage;
      config.optimizer.zero_reduce = config::ZeroReduce::kPerMicrobatch;
      const StepRecord sharded = train_recording_bytes(config, *world);
      config.optimizer.zero_reduce = config::ZeroReduce::kPerStep;
      const StepRecord per_step = train_recording_bytes(config, *world);
      std::string worst;
      // The bf16 wire: against each tensor's scale (a bias near zero is a few bf16 roundings from it).
      const double param_diff = layout.tolerance == kRounding ? max_param_rel_diff(plain.run, sharded.run, &worst)
                                                              : max_scaled_param_diff(plain.run, sharded.run, &worst);
      const double loss_diff = max_loss_rel_diff(plain.run, sharded.run);
      const double norm_diff = max_grad_norm_rel_diff(sharded.run, plain.run);
      EXPECT_LE(loss_diff, layout.tolerance);
      EXPECT_LE(param_diff, layout.tolerance) << "worst " << worst;
      EXPECT_LE(norm_diff, layout.tolerance);
      RunRecord initial;
      initial.params = train::Trainer(config, *world).gather_parameters();
      EXPECT_GT(max_param_rel_diff(initial, sharded.run), 1e-3);  // it trained
      // One step's bytes per micro-batch (a split tied table's bucket once per step: compared exactly only where
      // there is none). Micro-batches of the step: global batch / (micro-batch x dp).
      const auto resolved = [&] {
        auto c = config;
        c.resolve(world->size());
        return c;
      }();
      const std::int64_t microbatches = resolved.resolved_batch().gradient_accumulation_steps;
      // With pp 2 the tied table is split over the two pp ranks (ZB-V's V keeps it on one rank).
      const bool split_table = resolved.parallel.pipeline_model_parallel_size > 1 && resolved.parallel.schedule != "zb_v";
      if (layout.tolerance == kRounding && !split_table) {
        // ZeRO-3's buckets are its units in both forms; ZeRO-2's pack whole blocks per micro-batch where the
        // per-step form cuts by size (the padding differs, by less than 2%).
        const double expected = static_cast<double>(microbatches * per_step.dp_bytes.back());
        if (stage == 3) EXPECT_EQ(static_cast<double>(sharded.dp_bytes.back()), expected);
        else EXPECT_NEAR(static_cast<double>(sharded.dp_bytes.back()), expected, 0.02 * expected);
      } else {
        EXPECT_GT(sharded.dp_bytes.back(), per_step.dp_bytes.back());
      }
      if (world->rank() == 0) {
        std::printf("[ zero-%d ] per micro-batch %-30s vs plain dp: loss %.3g, param %.3g, grad-norm %.3g rel diff; "
                    "%lld micro-batches, dp bytes/step %lld (per step %lld)\n",
                    stage, layout.name.c_str(), loss_diff, param_diff, norm_diff, static_cast<long long>(microbatches),
                    static_cast<long long>(sharded.dp_bytes.back()), static_cast<long long>(per_step.dp_bytes.back()));
      }
    }
  }
  // Deterministic mode: auto reduces once per step (the canonical order), as per_step does.
  auto config = tiny_gpt({"batch.micro_batch_size=1", kTinyBuckets, "optimizer.zero_stage=2", "train.steps=1"});
  config::RunConfig resolved = config;
  resolved.resolve(world->size());
  if (resolved.parallel.data_parallel_size > 1) {
    const StepRecord automatic = train_recording_bytes(config, *world);
    config.optimizer.zero_reduce = config::ZeroReduce::kPerStep;
    EXPECT_EQ(automatic.dp_bytes.back(), train_recording_bytes(config, *world).dp_bytes.back());
    EXPECT_EQ(config::resolved_zero_reduce(resolved), config::ZeroReduce::kPerStep);
  }
}

// The gradient peak per micro-batch, against ZeRO-0 and the memory plan: with 4 micro-batches per replica and
// buckets of one block (parallel.dp_bucket_mb 0.05 MiB; a GPT block of d 32 has 12704 parameters, 49.6 KiB), a
// replica holds within the step its shards (1/dp of the gradients, up to padding) and at most two buckets
// (the one in flight, the one being filled) besides the tied table's bucket, which the head's W opens and the
// embedding's closes: peak <= ZeRO-0's / dp + 2 blocks + the table (+3% padding); the allocator's peaks of
// parameters, gradients and optimizer state are the plan's within 2%. Against the per-step
// form of the same stage, the peak drops by at least half of ZeRO-0's less those two blocks.
TEST(ZeroPerMicrobatch, GradientPeakIsTheShardsPlusTwoBucketsAsPlanned) {
  auto world = make_world();
  const int dp = world->size();
  const std::int64_t block_bytes = 4 * (4 * 32 * 32 + 2 * 32 * 128 + 9 * 32 + 128);
  const std::int64_t table_bytes = 4 * (96 + 16) * 32;  // the tied table (and positions): written from head to embedding
  const auto near = [](std::int64_t measured, std::int64_t planned) {
    return std::abs(static_cast<double>(measured - planned)) <= 0.02 * static_cast<double>(planned);
  };
  auto config = tiny_gpt({"optimizer.type=adamw", "batch.micro_batch_size=1", "parallel.dp_bucket_mb=0.05",
                          "model.n_layers=8", "batch.global_batch_size=" + std::to_string(4 * dp), "train.steps=2"});
  config.train.deterministic = false;
  std::int64_t zero0 = 0;
  for (int stage : {0, 2, 3}) {
    std::int64_t peak[2] = {0, 0};
    for (const auto reduce : {config::ZeroReduce::kPerMicrobatch, config::ZeroReduce::kPerStep}) {
      if (stage == 0 && reduce == config::ZeroReduce::kPerStep) continue;
      SCOPED_TRACE("zero " + std::to_string(stage) + " " + std::string(enum_name(reduce)));
      config.optimizer.zero_stage = stage;
      config.optimizer.zero_reduce = reduce;
      const auto [stats, plan] = steady_state_memory(config, *world);
      for (MemoryCategory category :
           {MemoryCategory::kParameters, MemoryCategory::kGradients, MemoryCategory::kOptimizerState}) {
        const std::int64_t planned = plan.bytes[static_cast<std::size_t>(category)];
        EXPECT_TRUE(near(stats.peak_of(category), planned))
            << memory_category_name(category) << ": measured peak " << stats.peak_of(category) << " B, planned "
            << planned << " B";
      }
      EXPECT_EQ(stats.current_of(MemoryCategory::kGradients), stage == 0 ? stats.peak_of(MemoryCategory::kGradients) : 0);
      const std::int64_t grads = stats.peak_of(MemoryCategory::kGradients);
      peak[reduce == config::ZeroReduce::kPerStep ? 1 : 0] = grads;
      if (stage == 0) zero0 = grads;
      if (world->rank() == 0) {
        std::printf("[ memory ] dp %d zero %d %-14s gradient peak %lld B (plan %lld B, ZeRO-0 %lld B)\n", dp, stage,
                    stage == 0 ? "-" : std::string(enum_name(reduce)).c_str(), static_cast<long long>(grads),
                    static_cast<long long>(plan.bytes[static_cast<std::size_t>(MemoryCategory::kGradients)]),
                    static_cast<long long>(zero0));
      }
    }
    if (stage == 0) continue;
    ASSERT_GT(zero0, 0);
    EXPECT_LE(static_cast<double>(peak[0]), 1.03 * (static_cast<double>(zero0) / dp + 2.0 * block_bytes + table_bytes));
    EXPECT_GE(static_cast<double>(peak[0]), static_cast<double>(zero0) / dp);  // the shards are all there
    EXPECT_LE(static_cast<double>(peak[0]), static_cast<double>(peak[1]) - static_cast<double>(zero0) / dp +
                                                 2.0 * block_bytes);
  }
}

}  // namespace
}  // namespace cleave::testing::dp_zero_per_microbatch_test
