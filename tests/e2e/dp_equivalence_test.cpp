// Data-parallel layouts against one rank, and ZeRO 1-3 against plain data parallel, in deterministic mode
// (e2e_data_parallel_np2, _np4; the binary's other files: dp_zero_memory_test.cpp, dp_zero_per_microbatch_test.cpp,
// dp_zero_internals_test.cpp, dp_overlap_test.cpp).
//
// What it asserts:
//  - Data parallel in deterministic mode is BIT-IDENTICAL to one rank at the same global batch: per-step
//    losses, gradient norms, final parameters to the last bit — with many tiny buckets (kTinyBuckets: about
//    40 buckets per rank), with gradient accumulation, with ZeRO-1 and clipping, with AdamW. Why it can be:
//    every micro-batch gradient carries the same loss scale 1/(global micro-batches), each replica sums its
//    micro-batches and the reduction sums the replicas in the canonical tree order (engine/core/sum_tree.hpp),
//    which for power-of-two micro-batches per replica is the order one rank sums them in.
//  - dp2 x pp2 layouts (tied table split over the two pp ranks, interleaved, ZB-V) match one rank within
//    float rounding (kRounding): the tied table's copies sum their micro-batches separately before the copies
//    are added, where one rank adds head and embedding gradient inside each micro-batch. The reference trains
//    inside rank 0 on a communicator of its own (as in pipeline_equivalence_test.cpp).
//  - ZeRO-1 equals plain data parallel BIT FOR BIT (AdamW and SGD with momentum, clipping active, weight
//    decay on): the rank-ordered reduce-scatter adds the same contributions in the same order as the
//    rank-ordered all-reduce, the global norm is summed from the same dp shards in both modes, and the
//    update is element-wise (same kernels on the same values), so every bit must agree.
//  - ZeRO-2 equals plain data parallel BIT FOR BIT in the same layouts (its reduce-scatter writes into a
//    shard buffer of its own, the arithmetic is ZeRO-1's), with a bf16 wire too, and dp2 x pp2 with the tied
//    table split.
//  - ZeRO-3 equals plain data parallel BIT FOR BIT in losses, gradient norms and parameters, under every
//    schedule that splits or interleaves the backward (ZB-H1 with full recomputation, ZB-V with the tied table
//    shared by two local stages, interleaved in bf16), with tp2 and sequence parallelism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "dp_test_support.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::dp_equivalence_test {
namespace {

struct Layout {
  std::string name;
  std::vector<std::string> overrides;
  bool bit_identical = true;  // against one rank; false: within kRounding
  std::vector<int> zero_stages = {1, 2, 3};  // ZeroSharded: the stages compared with plain data parallel
};

std::vector<Layout> one_rank_layouts(int world) {
  const std::string zero1 = "optimizer.zero_stage=1";
  const std::string clip = "optimizer.grad_clip=0.05";
  if (world == 2) {
    return {{"dp2_tiny_buckets", {"batch.micro_batch_size=4", kTinyBuckets}},
            {"dp2_untied_tiny_buckets", {"batch.micro_batch_size=4", "model.tie_embeddings=false", kTinyBuckets}},
            {"dp2_accumulate", {"batch.micro_batch_size=2", kTinyBuckets}},
            {"dp2_accumulate_4", {"batch.micro_batch_size=1", kTinyBuckets}},
            {"dp2_zero1_clipped", {"batch.micro_batch_size=2", kTinyBuckets, zero1, clip}},
            {"dp2_adamw_clipped", {"batch.micro_batch_size=1", "optimizer.type=adamw", "optimizer.lr=0.01", clip}},
            {"dp2_zero3_clipped", {"batch.micro_batch_size=2", "optimizer.zero_stage=3", clip}}};
  }
  if (world == 4) {
    return {{"dp4_tiny_buckets", {"batch.micro_batch_size=2", kTinyBuckets}},
            {"dp4_zero1_accumulate", {"batch.micro_batch_size=1", kTinyBuckets, zero1}},
            {"dp4_adamw_zero1", {"batch.micro_batch_size=1", "optimizer.type=adamw", "optimizer.lr=0.01", zero1}},
            {"dp2_pp2_tied_split_zero1", {pp(2), kTinyBuckets, zero1, clip}, false},
            {"dp2_pp2_interleaved_zero1", {pp(2), "parallel.schedule=interleaved_1f1b", kTinyBuckets, zero1}, false},
            {"dp2_pp2_zb_v_tied_shared", {pp(2), "parallel.schedule=zb_v", kTinyBuckets, zero1}, false},
            {"dp2_pp2_zb_h1_zero3", {pp(2), "parallel.schedule=zb_h1", "optimizer.zero_stage=3"}, false}};
  }
  return {};
}

TEST(DataParallelEquivalence, BucketedAndShardedLayoutsMatchOneRank) {
  auto world = make_world(/*deterministic=*/true);
  auto self = world->split(world->rank(), 0, "self");
  const auto layouts = one_rank_layouts(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no layouts for world size " << world->size();
  for (const auto& layout : layouts) {
    SCOPED_TRACE(layout.name);
    const auto config = tiny_gpt(layout.overrides);
    const RunRecord parallel = train_steps(config, *world);
    if (world->rank() != 0) continue;
    const RunRecord reference = train_steps(single_rank_config(config), *self);
    EXPECT_LT(reference.losses.back(), reference.losses.front());  // it trained
    std::string worst;
    const double param_diff = max_param_rel_diff(parallel, reference, &worst);
    const double loss_diff = max_loss_rel_diff(parallel, reference);
    const double norm_diff = max_grad_norm_rel_diff(parallel, reference);
    if (layout.bit_identical) {
      for (std::size_t i = 0; i < reference.losses.size(); ++i) {
        EXPECT_EQ(parallel.losses[i], reference.losses[i]) << "step " << i;
      }
      EXPECT_EQ(param_diff, 0.0) << "worst " << worst;
      // The norm's squares are summed over other partitions (dp shards), exactly (ops::sum_squares_exact): equal.
      EXPECT_EQ(norm_diff, 0.0);
    } else {
      EXPECT_LE(loss_diff, kRounding);
      EXPECT_LE(param_diff, kRounding) << "worst " << worst;
      EXPECT_LE(norm_diff, kRounding);
    }
    std::printf("[ layout ] %-28s max loss rel diff %.3g, param rel diff %.3g, grad-norm rel diff %.3g\n",
                layout.name.c_str(), loss_diff, param_diff, norm_diff);
  }
}

std::vector<Layout> zero_layouts(int world) {
  const std::string adamw = "optimizer.type=adamw";
  const std::string sgd = "optimizer.type=sgd";
  const std::string lr = "optimizer.lr=0.01";
  const std::string clip = "optimizer.grad_clip=0.05";
  if (world == 2) {
    return {{"dp2_adamw", {"batch.micro_batch_size=2", adamw, lr, clip, kTinyBuckets}},
            {"dp2_sgd", {"batch.micro_batch_size=2", sgd, clip, kTinyBuckets}},
            {"dp2_adamw_one_bucket", {"batch.micro_batch_size=4", adamw, lr, clip}},
            {"dp2_sgd_bf16_wire", {"batch.micro_batch_size=1", sgd, clip, kTinyBuckets, "parallel.grad_reduce_dtype=bf16"}},
            {"dp2_adamw_bf16_precision", {"batch.micro_batch_size=2", adamw, lr, clip, kTinyBuckets, "device.precision=bf16"}}};
  }
  if (world == 4) {
    return {{"dp4_adamw", {"batch.micro_batch_size=2", adamw, lr, clip, kTinyBuckets}},
            {"dp4_sgd_nesterov", {"batch.micro_batch_size=1", sgd, "optimizer.nesterov=true", clip, kTinyBuckets}},
            {"dp2_pp2_tied_split_adamw", {pp(2), adamw, lr, clip, kTinyBuckets}},
            {"dp2_pp2_tied_split_sgd", {pp(2), sgd, clip, kTinyBuckets}},
            {"dp2_tp2_adamw", {"parallel.tensor_model_parallel_size=2", adamw, lr, clip, kTinyBuckets}},
            // ZeRO-3 under the schedules that split or interleave the backward: W runs without gathering (it
            // reads stashes only), ZB-V's tied table is one unit both local stages read, a recomputed block
            // reruns its forward inside its gathered input-gradient pass, virtual stages gather per chunk.
            {"dp2_pp2_zb_h1_recompute", {pp(2), "parallel.schedule=zb_h1", "train.recompute=full", adamw, lr, clip},
             true, {3}},
            {"dp2_pp2_zb_v_tied_shared", {pp(2), "parallel.schedule=zb_v", sgd, clip}, true, {3}},
            {"dp2_pp2_interleaved_bf16", {pp(2), "parallel.schedule=interleaved_1f1b", adamw, lr, clip,
                                          "device.precision=bf16"}, true, {3}},
            {"dp2_tp2_sequence_parallel", {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                                           adamw, lr, clip}, true, {3}},
            {"dp2_pp2_dualpipev", {pp(2), "parallel.schedule=dualpipev", sgd, clip}, true, {3}},
            {"dp2_pp2_zb_h2", {pp(2), "parallel.schedule=zb_h2", sgd, clip}, true, {3}},
            {"dp2_pp2_gpipe", {pp(2), "parallel.schedule=gpipe", adamw, lr, clip}, true, {3}},
            {"dp2_pp2_auto", {pp(2), "parallel.schedule=auto", adamw, lr, clip}, true, {3}}};
  }
  return {};
}

TEST(ZeroSharded, StagesOneTwoAndThreeMatchPlainDataParallelBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  const auto layouts = zero_layouts(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no layouts for world size " << world->size();
  for (const auto& layout : layouts) {
   for (int stage : layout.zero_stages) {
    SCOPED_TRACE(layout.name + " zero_stage " + std::to_string(stage));
    auto config = tiny_gpt(layout.overrides);
    const RunRecord plain = train_steps(config, *world);
    config.optimizer.zero_stage = stage;
    const RunRecord sharded = train_steps(config, *world);
    ASSERT_EQ(plain.losses.size(), sharded.losses.size());
    bool clipped = false;
    for (std::size_t i = 0; i < plain.losses.size(); ++i) {
      EXPECT_EQ(plain.losses[i], sharded.losses[i]) << "step " << i;
      // ZeRO-3's buckets are cut at blocks, so its shards split the elements elsewhere; the norm's sum is exact
      // (ops::sum_squares_exact), so every stage's norm equals plain data parallel's bit for bit.
      EXPECT_EQ(plain.grad_norms[i], sharded.grad_norms[i]) << "step " << i;
      clipped = clipped || plain.grad_norms[i] > config.optimizer.grad_clip;
    }
    EXPECT_TRUE(clipped) << "clipping never engaged; the comparison would not cover it";
    EXPECT_LT(plain.losses.back(), plain.losses.front());
    std::string worst;
    EXPECT_EQ(max_param_rel_diff(plain, sharded, &worst), 0.0) << "worst " << worst;
    // Nothing identical by accident: the parameters moved.
    RunRecord initial;
    initial.params = train::Trainer(config, *world).gather_parameters();
    EXPECT_GT(max_param_rel_diff(initial, sharded), 1e-3);
    if (world->rank() == 0) {
      std::printf("[ zero-%d ] %-26s bit-identical to plain dp over %zu steps (grad norms %.4g .. %.4g, clip %.3g)\n",
                  stage, layout.name.c_str(), plain.losses.size(), plain.grad_norms.front(), plain.grad_norms.back(),
                  config.optimizer.grad_clip);
    }
   }
  }
}

}  // namespace
}  // namespace cleave::testing::dp_equivalence_test
