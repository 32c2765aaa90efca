// The memory plan's activation estimate walks each rank's actions in schedule order: with a fused backward
// (1F1B) it is peak-live x stage-stash plus what one block holds beyond its stash while B runs it (B runs
// each block's I then W, pipeline/stage_module.hpp); with split backward (ZB-H1) a micro-batch keeps, from I to
// W, what the weight gradients need (weights' inputs, output gradients), so under full recomputation the
// deferred W's rebuilt stashes make ZB-H1 need more than 1F1B, which the old peak-live x forward-stash
// formula missed (measured stashes after backward_input: LayerContract tests in tests/unit/layers).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::run_plan::memory_plan_test {
namespace {

config::RunConfig pp2(const std::string& schedule, const std::string& recompute) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1},
    "parallel": {"pipeline_model_parallel_size": 2}, "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})",
                                             "<string>", {"parallel.schedule=" + schedule, "train.recompute=" + recompute});
  c.resolve(2);
  return c;
}

std::int64_t activations(const config::RunConfig& c, int pp_rank) {
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), pp_rank);
  return estimate_rank_memory(plan, c, pp_rank).bytes[static_cast<std::size_t>(MemoryCategory::kActivations)];
}

TEST(MemoryPlan, FusedBackwardIsPeakLiveStashesPlusOneBlocksExtra) {
  for (const char* mode : {"none", "selective", "full"}) {
    const config::RunConfig c = pp2("1f1b", mode);
    const Plan plan = make_plan(c, 8, 0);
    const auto costs = partition::model_costs(plan.spec, DType::kF32, parse_enum<partition::Recompute>(mode, "train.recompute"));
    for (int r = 0; r < 2; ++r) {
      const auto range = plan.partition.stages[static_cast<std::size_t>(r)];
      std::int64_t stash = 0, extra = 0;
      for (int b = range.begin; b < range.end; ++b) stash += costs[static_cast<std::size_t>(b)].activation_bytes;
      // B runs the blocks' backwards last to first, each I then W: block b holds its extra on top of the
      // stashes of the blocks before it (the later ones are freed); the last block's dy is the received tensor.
      std::int64_t later = 0;
      for (int b = range.end - 1; b >= range.begin; --b) {
        const auto& cost = costs[static_cast<std::size_t>(b)];
        const std::int64_t dy = b == range.end - 1 ? cost.output_bytes : 0;
        extra = std::max(extra, cost.backward_extra_bytes - dy - later);
        later += cost.activation_bytes;
      }
      const int live = pipeline::peak_activations(plan.schedule.ranks[static_cast<std::size_t>(r)]);
      // Rank 0 sends its output, rank 1 receives the same tensor's shape. In flight at rank 0's peak (a B in the
      // steady state, after an F): its dy, the next B's dy (posted a block early) and the F's output just sent (held
      // until the test after the B); at rank 1's (a B after its F): the next F's input, posted a block early.
      const std::int64_t boundary = costs[static_cast<std::size_t>(r == 0 ? range.end - 1 : range.begin - 1)].output_bytes;
      EXPECT_EQ(activations(c, r), live * stash + extra + (r == 0 ? 3 : 1) * boundary) << mode << " pp rank " << r;
    }
  }
}

// A transformer block's backward extra by hand (per sample, tp 1 and 2): the MLP part's dy, dg and dh, or the
// attention part's gradients, whichever is larger, plus what recomputation rebuilds (selective: the attention's
// log-sum-exp; memory-efficient attention keeps no probabilities).
TEST(MemoryPlan, TransformerBackwardExtraByHand) {
  partition::GptConfig g;
  g.vocab_size = 64, g.d_model = 32, g.n_layers = 1, g.n_heads = 4, g.seq_len = 16;
  for (std::int64_t d_ff : {128, 32}) {  // MLP part larger, attention part larger
    g.d_ff = d_ff;
    const partition::ModelSpec spec = partition::make_gpt_spec(g);
    const auto& block = spec.blocks[1];
    ASSERT_EQ(block.kind, partition::BlockKind::kTransformerBlock);
    const std::int64_t t = 16, d = 32, h = 4;
    for (int tp : {1, 2}) {
      const std::int64_t mlp = 4 * (2 * t * d_ff / tp + t * d), attention = 4 * (4 * t * d + 4 * t * d / tp);
      const std::int64_t stats = 4 * (h / tp) * t;  // the attention's lse [H/tp, T] f32, rebuilt under selective
      EXPECT_EQ(partition::block_cost(block, DType::kF32, partition::Recompute::kNone, tp).backward_extra_bytes,
                std::max(mlp, attention)) << "d_ff " << d_ff << " tp " << tp;
      EXPECT_EQ(partition::block_cost(block, DType::kF32, partition::Recompute::kSelective, tp).backward_extra_bytes,
                std::max(mlp, attention + stats)) << "d_ff " << d_ff << " tp " << tp;
      const auto full = partition::block_cost(block, DType::kF32, partition::Recompute::kFull, tp);
      const auto none = partition::block_cost(block, DType::kF32, partition::Recompute::kNone, tp);
      EXPECT_EQ(full.backward_extra_bytes, none.activation_bytes - 4 * t * d + std::max(mlp, attention))
          << "d_ff " << d_ff << " tp " << tp;
    }
  }
}

TEST(MemoryPlan, SplitBackwardHoldsWhatWeightGradientsNeedUntilW) {
  for (const char* mode : {"none", "full"}) {
    SCOPED_TRACE(mode);
    const config::RunConfig fused = pp2("1f1b", mode), split = pp2("zb_h1", mode);
    // Rank 0 holds p = 2 micro-batches in both; under ZB-H1 one of them sits between I and W.
    EXPECT_GT(activations(split, 0), activations(fused, 0));
  }
  // Full recomputation still saves memory under ZB-H1, but less than under 1F1B: the deferred W's inputs and
  // output gradients are rebuilt at I and kept.
  const double saved_fused = 1.0 - static_cast<double>(activations(pp2("1f1b", "full"), 0)) / activations(pp2("1f1b", "none"), 0);
  const double saved_split = 1.0 - static_cast<double>(activations(pp2("zb_h1", "full"), 0)) / activations(pp2("zb_h1", "none"), 0);
  EXPECT_GT(saved_fused, saved_split);
  EXPECT_GT(saved_split, 0.0);
}

// ZeRO-2 reduced once per step: the gradients peak at the full buckets plus what their trades for shards add, in
// bucket order (a shard allocated, then its bucket freed): max over k of shard_k − Σ_{j<k}(bucket_j − shard_j), by
// hand on an mlp (64 → 8 → 1000) at dp 2 with 0.005 MiB buckets (1310 f32 elements). Ready order, the last block
// first and each block's tensors last to first: b2 (1000), W2 (8000), b1 (8), W1 (512). Buckets: b2 alone (W2 would
// pass the cap), 1000 → 1008 at 16-element alignment; W2 alone, 8000; b1 from 0 and W1 from 16: 528. Shards (÷ 2):
// 504, 4000, 264. The second trade adds 4000 − (1008 − 504) = 3496 elements, more than the first's 504: a lone
// large tensor after a small bucket. (The former bound, a whole dp_bucket_mb bucket's shard, was 2621 B here.)
TEST(MemoryPlan, ZeroTwoPerStepTradesBucketsInOrderByHand) {
  for (const char* wire : {"fp32", "bf16"}) {
    SCOPED_TRACE(wire);
    config::RunConfig c = config::parse_config(R"({
      "model": {"type": "mlp", "in_features": 64, "hidden": [8], "num_classes": 1000},
      "batch": {"global_batch_size": 4, "micro_batch_size": 1}, "parallel": {"dp_bucket_mb": 0.005},
      "optimizer": {"type": "adamw", "zero_stage": 2, "zero_reduce": "per_step"}, "data": {"type": "synthetic"}})",
                                               "<string>", {std::string("parallel.grad_reduce_dtype=") + wire});
    c.resolve(2);
    const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
    const MemoryPlan m = estimate_rank_memory(plan, c, 0);
    const auto at = [&m](MemoryCategory k) { return m.bytes[static_cast<std::size_t>(k)]; };
    const std::int64_t buckets = 1008 + 8000 + 528;
    EXPECT_EQ(at(MemoryCategory::kParameters), 4 * buckets);  // the flat f32 values, laid out like the buckets
    EXPECT_EQ(at(MemoryCategory::kOptimizerState), 2 * 4 * (504 + 4000 + 264));  // AdamW's two moments of the shards
    // A bf16 wire frees each f32 bucket at its launch and allocates the shards in finish(): the buckets alone.
    const bool staged = std::string(wire) == "bf16";
    EXPECT_EQ(at(MemoryCategory::kGradients), 4 * (buckets + (staged ? 0 : 4000 - (1008 - 504))));
    EXPECT_EQ(m.gradients_between_steps, 0);
  }
}

}  // namespace
}  // namespace cleave::run_plan::memory_plan_test
