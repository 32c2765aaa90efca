// ZeRO-2 and ZeRO-3 with expert parallelism (issue 36 parts 1 and 3; run under mpiexec, np 2 and 4). Expert
// parameters (their gradients, optimizer state and, at stage 3, the parameters themselves) are sharded over the
// expert-dp group (the dp × cp / ep ranks holding the same experts), the rest over dp × cp
// (engine/train/data_parallel.hpp). What it asserts, in deterministic mode:
//  - Each layout trained for up to 10 steps (AdamW, weight decay on, clipping engaged: the norm must count every
//    element once over both groups) equals ONE RANK (the same config on a communicator of rank 0's own: no ep, no
//    dp, no ZeRO) BIT FOR BIT in per-step losses and final logical parameters, and in the gradient norm to 1e-14
//    relative (its squares are summed over other partitions: dp shards, expert-dp shards, ZeRO-3's per-block
//    units). Why it can be: ep 2 and 4 equal ep 1 bit for bit (ep_equivalence_test.cpp: the dispatch sums per source
//    lane, then canonically); ZeRO 1-3 equal plain data parallel bit for bit (dp_equivalence_test.cpp: rank-ordered
//    reduce-scatter adds what the all-reduce adds, the update is element-wise); and plain data parallel equals one
//    rank (canonical micro-batch tree, power-of-two micro-batches per replica). Nothing here may differ in the
//    last bit, so the bound is 0. (The clip factor is a float computed from the double norm: a last-bit norm
//    difference could in principle flip it; these runs are deterministic and it does not, as in ZeroSharded.)
//    Layouts: np 2: ep 2 in dp 2 (expert-dp groups of 1: the experts unsharded, the rest over 2) at ZeRO-2 and 3,
//    ZeRO-3 in bf16 too (the bf16 working shards); np 4: ep 2 in dp 4 (two expert-dp groups of 2) at ZeRO-2 and 3,
//    ep 4 at ZeRO-3 (expert-dp of 1); against the same layout at ep 1 without ZeRO on the same world (context
//    parallelism's attention chunks and a pipeline's tied table round differently from one rank's): ep 2 from
//    dp 2 × cp 2 at ZeRO-3, ep 2 × pp 2 under zb_v at ZeRO-3 and under dualpipev at ZeRO-2 (the split backward's W
//    actions report the expert gradients final, the all-to-alls inside F, I and W), and ep 2 × tp 2 (ep from dp 2,
//    each ep rank's experts split over tp, expert-dp groups of 1) at ZeRO-2 and ZeRO-3 against tp 2 at ep 1 without
//    ZeRO (tp's partial sums associate differently from one rank's: moe_equivalence_test.cpp's bound; against tp 2
//    itself nothing changes but who holds which expert and which shard, so the bound is 0 here too).
//  - optimizer.zero_reduce per_microbatch (the main buckets per micro-batch, the experts' per step) matches ZeRO-0 at
//    the same ep within float rounding (5e-6, SGD with momentum).
//  - Between steps a ZeRO-3 rank holds no gradient, and its f32 parameter shards are (non-expert / (dp × cp) +
//    experts / ep / expert-dp) of the model, up to the units' alignment padding (the allocator's kParameters).
//  - Checkpoints are layout-independent: a ZeRO-3 ep 2 run saved after 2 of 4 steps (each rank writes its segments
//    of the expert and non-expert master shards and of the AdamW state) resumes at ep 1 without ZeRO and at ZeRO-3
//    ep 2, both continuing the uninterrupted one-layout run bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/train/collectives.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/layout_compare.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::ep_zero_test {
namespace {

config::RunConfig tiny_moe(std::int64_t steps, const std::vector<std::string>& overrides) {
  return tiny_ep_moe_zero("tiny_moe", steps, overrides);
}

std::string ep(int size) { return "parallel.expert_model_parallel_size=" + std::to_string(size); }
std::string zero(int stage) { return "optimizer.zero_stage=" + std::to_string(stage); }

struct Case {
  std::string name;
  std::int64_t steps = 10;
  std::vector<std::string> overrides;
  // Set: the reference is this config on the same world (context parallelism's chunked attention and a pipeline's tied
  // table, its copies summed per micro-batch set, are not bit-identical to one rank's, so those layouts are compared
  // with the same layout at ep 1 without ZeRO, itself within rounding of one rank: context_parallel_test.cpp,
  // dp_equivalence_test.cpp). Empty: one rank.
  std::vector<std::string> world_reference;
};

std::vector<Case> cases_for(int world) {
  const std::string bf16 = "device.precision=bf16";
  if (world == 2) {
    return {{"ep2_dp2_zero2", 10, {ep(2), zero(2)}, {}},
            {"ep2_dp2_zero3", 10, {ep(2), zero(3)}, {}},
            {"ep2_dp2_zero3_bf16", 6, {ep(2), zero(3), bf16}, {}}};
  }
  if (world == 4) {
    const std::string cp2 = "parallel.context_parallel_size=2", pp2 = "parallel.pipeline_model_parallel_size=2";
    const std::string zb_v = "parallel.schedule=zb_v", dualpipev = "parallel.schedule=dualpipev";
    const std::string tp2 = "parallel.tensor_model_parallel_size=2";
    return {{"ep2_in_dp4_zero2", 8, {ep(2), zero(2)}, {}},
            {"ep2_in_dp4_zero3", 8, {ep(2), zero(3)}, {}},
            {"ep4_zero3", 6, {ep(4), zero(3)}, {}},
            {"ep2_from_dp2_cp2_zero3", 6, {ep(2), zero(3), cp2}, {cp2}},
            {"ep2_pp2_zb_v_zero3", 6, {ep(2), zero(3), pp2, zb_v}, {pp2, zb_v}},
            {"ep2_pp2_dualpipev_zero2", 6, {ep(2), zero(2), pp2, dualpipev}, {pp2, dualpipev}},
            {"ep2_tp2_zero2", 6, {ep(2), zero(2), tp2}, {tp2}},
            {"ep2_tp2_zero3", 6, {ep(2), zero(3), tp2}, {tp2}}};
  }
  return {};
}

TEST(EpZero, ZeroTwoAndThreeWithEpMatchOneRankBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  auto self = world->split(world->rank(), 0, "self");
  const auto cases = cases_for(world->size());
  if (cases.empty()) GTEST_SKIP() << "no cases for world size " << world->size();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const config::RunConfig config = tiny_moe(c.steps, c.overrides);
    const RunRecord parallel = train_steps(config, *world);
    const bool on_world = !c.world_reference.empty();
    const RunRecord reference = on_world ? train_steps(tiny_moe(c.steps, c.world_reference), *world)
                                : world->rank() == 0 ? train_steps(single_rank_config(config), *self)
                                                     : RunRecord{};
    if (world->rank() != 0) continue;
    ASSERT_EQ(parallel.losses.size(), reference.losses.size());
    bool clipped = false;
    double norm_diff = 0;
    for (std::size_t i = 0; i < reference.losses.size(); ++i) {
      EXPECT_TRUE(std::isfinite(parallel.losses[i])) << "step " << i;
      EXPECT_EQ(parallel.losses[i], reference.losses[i]) << "step " << i;
      norm_diff = std::max(norm_diff, std::abs(parallel.grad_norms[i] - reference.grad_norms[i]) /
                                          reference.grad_norms[i]);
      clipped = clipped || reference.grad_norms[i] > config.optimizer.grad_clip;
    }
    EXPECT_EQ(norm_diff, 0.0) << "the norm's sum is exact (ops::sum_squares_exact): no grouping may show";
    EXPECT_TRUE(clipped) << "clipping never engaged; the norm's grouping would go unchecked";
    EXPECT_LT(reference.losses.back(), reference.losses.front());  // it trained
    std::string worst;
    EXPECT_EQ(max_param_rel_diff(parallel, reference, &worst), 0.0) << "worst " << worst;
    ASSERT_EQ(parallel.params.at("blocks.0.moe.experts.gate.weight").size(), 4u * 12u * 16u);
    std::printf("[ ep-zero ] %-24s %lld steps: losses %.6f -> %.6f, bit-identical to %s (grad-norm rel diff "
                "%.2g)\n",
                c.name.c_str(), static_cast<long long>(c.steps), parallel.losses.front(), parallel.losses.back(),
                on_world ? "its layout at ep 1, ZeRO-0" : "one rank", norm_diff);
  }
}

// optimizer.zero_reduce per_microbatch (outside deterministic mode): the main buckets are reduce-scattered every
// micro-batch, the expert buckets once per step (data_parallel.hpp). Against ZeRO-0 at the same ep on the same
// world within float rounding (5e-6 relative, dp_equivalence_test.cpp's bound for the same reordering: each
// replica's micro-batch-0 sum, plus micro-batch 1's, ...), SGD with momentum as there (AdamW turns rounding noise
// in near-zero gradients into lr-sized steps).
TEST(EpZero, PerMicrobatchReductionMatchesZeroZeroWithinRounding) {
  auto world = make_world();
  const int size = world->size();
  if (size != 2 && size != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  constexpr double kRounding = 5e-6;
  const std::vector<std::string> base = {ep(2), "train.deterministic=false", "optimizer.type=sgd",
                                         "optimizer.momentum=0.9", "optimizer.lr=0.05"};
  const RunRecord plain = train_steps(tiny_moe(6, base), *world);
  EXPECT_LT(plain.losses.back(), plain.losses.front());
  for (int stage : {2, 3}) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    std::vector<std::string> overrides = base;
    overrides.push_back(zero(stage));
    overrides.push_back("optimizer.zero_reduce=per_microbatch");
    const RunRecord sharded = train_steps(tiny_moe(6, overrides), *world);
    std::string worst;
    const double param_diff = max_param_rel_diff(plain, sharded, &worst);
    const double loss_diff = max_loss_rel_diff(plain, sharded);
    EXPECT_LE(loss_diff, kRounding);
    EXPECT_LE(param_diff, kRounding) << "worst " << worst;
    if (world->rank() == 0) {
      std::printf("[ ep-zero ] np %d ep 2 ZeRO-%d per micro-batch vs ZeRO-0: loss %.3g, param %.3g rel diff\n", size,
                  stage, loss_diff, param_diff);
    }
  }
}

// f32 elements of the named parameters' logical tensors (the one-rank model).
std::int64_t elements(const std::map<std::string, std::vector<float>>& params, bool experts) {
  std::int64_t n = 0;
  for (const auto& [name, values] : params) {
    if ((name.find(".experts.") != std::string::npos) == experts) n += static_cast<std::int64_t>(values.size());
  }
  return n;
}

TEST(EpZero, ZeroThreeKeepsEachGroupsShareBetweenSteps) {
  auto world = make_world(/*deterministic=*/true);
  const int size = world->size();
  if (size != 2 && size != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  const int ep_size = 2, expert_dp = size / ep_size;
  const config::RunConfig config = tiny_moe(2, {ep(ep_size), zero(3)});
  train::Trainer trainer(config, *world);
  for (std::int64_t s = 0; s < 2; ++s) trainer.step(s);
  const auto& stats = trainer.memory_stats();
  const std::int64_t held = stats.current_of(MemoryCategory::kParameters);
  const std::int64_t gradients = stats.current_of(MemoryCategory::kGradients);
  const auto logical = trainer.gather_parameters();
  const std::int64_t dense = elements(logical, false), experts = elements(logical, true);
  ASSERT_GT(experts, 0);
  const double expected = 4.0 * (static_cast<double>(dense) / size + static_cast<double>(experts) / ep_size / expert_dp);
  const double unsharded_experts = 4.0 * (static_cast<double>(dense) / size + static_cast<double>(experts) / ep_size);
  if (world->rank() == 0) {
    std::printf("[ ep-zero ] np %d ep %d ZeRO-3 between steps: parameters %lld B (shards of dense %lld / %d + experts "
                "%lld / %d / %d elements: %.0f B), gradients %lld B\n",
                size, ep_size, static_cast<long long>(held), static_cast<long long>(dense), size,
                static_cast<long long>(experts), ep_size, expert_dp, expected, static_cast<long long>(gradients));
  }
  EXPECT_EQ(gradients, 0);
  EXPECT_GE(static_cast<double>(held), expected);
  // The units' padding (16 elements, then a multiple of the group's size, per unit): at most 20 units here.
  EXPECT_LE(static_cast<double>(held), expected + 20.0 * 4 * (16 + size));
  if (expert_dp > 1) {
    EXPECT_LT(static_cast<double>(held), unsharded_experts) << "the experts are not sharded";
  }
}

TEST(EpZeroCheckpoint, ZeroThreeEpTwoResumesAtEpOne) {
  auto world = make_world(/*deterministic=*/true);
  const int size = world->size();
  if (size != 2 && size != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  constexpr std::int64_t kSteps = 4, kSaveAt = 2;
  const auto one = tiny_moe(kSteps, {});
  const auto zero3_ep2 = tiny_moe(kSteps, {ep(2), zero(3)});
  const std::string root = shared_dir(*world, "epzero", "resume");
  const RunRecord whole = run_from(one, *world, 0, kSteps);
  run_from(zero3_ep2, *world, 0, kSaveAt, "", root);
  const std::string dir = step_dir(root, kSaveAt);
  for (const auto* config : {&one, &zero3_ep2}) {
    SCOPED_TRACE(config == &one ? "resumed at ep 1, ZeRO-0" : "resumed at ep 2, ZeRO-3");
    const RunRecord rest = run_from(*config, *world, kSaveAt, kSteps, dir);
    ASSERT_EQ(rest.losses.size(), 2u);
    EXPECT_EQ(rest.losses[0], whole.losses[2]);
    EXPECT_EQ(rest.losses[1], whole.losses[3]);
    std::string worst;
    EXPECT_EQ(max_param_rel_diff(rest, whole, &worst), 0.0) << "worst " << worst;
  }
  world->barrier()->wait();
  if (world->rank() == 0) std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace cleave::testing::ep_zero_test
