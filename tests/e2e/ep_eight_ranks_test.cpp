// Expert parallelism in the layouts that need 8 ranks (issue 36 parts 3 and 4; run under mpiexec -n 8, oversubscribed
// on the 2-core machine), in deterministic mode, on a tiny MoE model (2 layers, d 16, 4 experts, top-2, few steps):
//  - ep 2 × tp 2 × pp 2 (ep taken from dp 2: expert-dp groups of 1; each ep rank's experts split over tp; the
//    all-to-alls inside the F, I and W actions of zb_v, dualpipev and 1f1b as the executor runs them) against the
//    same layout at ep 1 BIT FOR BIT (per-step losses, gradient norms and final logical parameters: ep changes only
//    who holds which expert, and the dispatch sums per source lane then canonically), and against ONE rank within
//    kTensorParallel (tp's partial sums associate differently from one rank's: moe_equivalence_test.cpp's bound,
//    SGD with momentum as there: AdamW's m / sqrt(v) turns a rounding difference in a near-zero gradient into a step).
//  - ep 2 × tp 2 inside dp 4 (two expert-dp groups of 2: the expert gradients are reduced, and under ZeRO their
//    gradients, optimizer state and at stage 3 the parameters themselves sharded, over expert-dp; the rest over
//    dp 4) at ZeRO-1, 2 and 3, and in bf16 at ZeRO-3, against tp 2 × dp 4 at ep 1 without ZeRO BIT FOR BIT
//    (AdamW with weight decay, clipping engaged on every step so the global norm must count every element once
//    over both groups; its sum of squares is exact, so the norm has the same bits too).
// Uses the layout-compare harness (tests/support/layout_compare.hpp) for every comparison. Each case is a few steps;
// one case runs 20 (the issue's length) where it is cheap. Extending: add a row to the case lists below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "mpi/mpi_test_env.hpp"
#include "support/layout_compare.hpp"
#include "train_harness.hpp"

namespace cleave::testing {
namespace {

constexpr double kTensorParallel = 2e-5;  // tests/e2e/moe_equivalence_test.cpp's tp bound

config::RunConfig tiny_moe(std::int64_t steps, const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"train.steps=" + std::to_string(steps)};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_config(R"({
    "model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2,
              "seq_len": 8, "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2, "aux_loss_coef": 0.05,
              "z_loss_coef": 0.01},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1},
    "optimizer": {"type": "adamw", "lr": 0.01, "grad_clip": 0.5, "weight_decay": 0.1, "warmup_steps": 0},
    "parallel": {"dp_bucket_mb": 0.001},
    "train": {"seed": 11, "deterministic": true, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", "tiny_moe_np8", all);
}

std::string ep(int size) { return "parallel.expert_model_parallel_size=" + std::to_string(size); }
std::string zero(int stage) { return "optimizer.zero_stage=" + std::to_string(stage); }
const std::string kTp2 = "parallel.tensor_model_parallel_size=2";
const std::string kPp2 = "parallel.pipeline_model_parallel_size=2";

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The gradient norms of `got` equal `want`'s bit for bit; clipping engaged on some step (else the norm's grouping
// would go unchecked).
void expect_norms_bit_identical(const RunRecord& got, const RunRecord& want, double grad_clip) {
  ASSERT_EQ(got.grad_norms.size(), want.grad_norms.size());
  bool clipped = false;
  for (std::size_t i = 0; i < want.grad_norms.size(); ++i) {
    EXPECT_EQ(std::memcmp(&got.grad_norms[i], &want.grad_norms[i], sizeof(double)), 0)
        << "step " << i << ": norm " << got.grad_norms[i] << " vs " << want.grad_norms[i];
    clipped = clipped || want.grad_norms[i] > grad_clip;
  }
  if (grad_clip > 0) {
    EXPECT_TRUE(clipped) << "clipping never engaged";
  }
}

// A layout: `layout` applies to both runs, `ep_only` to the run under test only (its ep and what must not change the
// result: ZeRO, the overlapped pairs); `one_rank` is its bound against one rank where the test takes one.
struct Case {
  std::string name;
  std::int64_t steps;
  std::vector<std::string> layout;
  std::vector<std::string> ep_only;
  Bound one_rank = Bound::relative(kTensorParallel);
};

// The run under test and its ep 1 reference on `world`, bit for bit (losses, norms, parameters); the reference is
// `references`' run of the same layout when it has one (several cases share it), else run and kept there.
RunRecord expect_matches_ep_one(const Case& c, comm::Communicator& world, std::map<std::string, RunRecord>& references,
                                double grad_clip) {
  const config::RunConfig config = tiny_moe(c.steps, with(c.layout, c.ep_only));
  RunRecord parallel;
  int pairs = 0, hand_overs = 0;  // parallel.moe_a2a_overlap's F&B pairs run interleaved on this rank
  {
    train::Trainer trainer(config, world);
    for (std::int64_t s = 0; s < c.steps; ++s) {
      const auto stats = trainer.step(s);
      parallel.losses.push_back(stats.loss);
      parallel.grad_norms.push_back(stats.grad_norm);
      pairs += stats.overlapped_pairs;
      hand_overs += stats.pair_hand_overs;
    }
    parallel.params = trainer.gather_parameters();
  }
  if (config.parallel.moe_a2a_overlap) {  // a run that fell back to one action at a time must not pass
    EXPECT_GT(pairs, 0) << "no F&B pair ran overlapped on rank " << world.rank();
    EXPECT_GE(hand_overs, pairs) << "pairs ran without handing the rank over on rank " << world.rank();
  }
  std::string key = std::to_string(c.steps);
  for (const std::string& o : c.layout) key += " " + o;
  auto it = references.find(key);
  if (it == references.end()) it = references.emplace(key, train_steps(tiny_moe(c.steps, c.layout), world)).first;
  const RunRecord& ep1 = it->second;
  EXPECT_EQ(parallel.params.at("blocks.0.moe.experts.gate.weight").size(), 4u * 12u * 16u);
  EXPECT_LT(ep1.losses.back(), ep1.losses.front());  // it trained
  expect_bit_identical(parallel, ep1);
  expect_norms_bit_identical(parallel, ep1, grad_clip);
  return parallel;
}

// ep 2 × tp 2 × pp 2 against tp 2 × pp 2 at ep 1 (bit for bit) and against one rank (within the case's bound).
TEST(EpEightRanks, EpTwoTpTwoPpTwoMatchesEpOneBitForBitAndOneRankWithinBound) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 8) GTEST_SKIP() << "runs at 8 ranks (ep 2 x tp 2 x pp 2)";
  auto self = world->split(world->rank(), 0, "self");
  const std::vector<std::string> base = {kTp2, kPp2, "optimizer.type=sgd", "optimizer.lr=0.05",
                                         "optimizer.momentum=0.9", "optimizer.weight_decay=0", "optimizer.grad_clip=0"};
  auto layout = [&base](std::vector<std::string> extra) { return with(base, extra); };
  const std::string zb_v = "parallel.schedule=zb_v", dualpipev = "parallel.schedule=dualpipev";
  // bf16 against one rank: moe_equivalence_test.cpp's bf16 tp bound (max |diff| / the tensor's largest magnitude).
  const Bound bf16_bound = Bound::scaled(3e-2, 1e-3);
  const std::vector<Case> cases = {
      {"ep2_tp2_pp2_zb_v", 20, layout({zb_v}), {ep(2)}},
      {"ep2_tp2_pp2_dualpipev", 20, layout({dualpipev}), {ep(2)}},
      // 4 layers: every one of the 4 stages holds an MoE block, so every rank's pairs hand over at an all-to-all.
      {"ep2_tp2_pp2_dualpipev_overlap", 20, layout({dualpipev, "model.n_layers=4"}),
       {ep(2), "parallel.moe_a2a_overlap=true"}},
      {"ep2_tp2_pp2_1f1b", 6, layout({"parallel.schedule=1f1b"}), {ep(2)}},
      {"ep2_tp2_sp_pp2_zb_v_full_recompute", 6, layout({zb_v, "parallel.sequence_parallel=true",
                                                        "train.recompute=full"}), {ep(2)}},
      {"ep2_tp2_pp2_zb_v_zero3", 6, layout({zb_v}), {ep(2), zero(3)}},
      {"ep2_tp2_pp2_dualpipev_bf16", 6, layout({dualpipev, "device.precision=bf16"}), {ep(2)}, bf16_bound}};
  std::map<std::string, RunRecord> references;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RunRecord parallel = expect_matches_ep_one(c, *world, references, 0);
    if (world->rank() != 0) continue;
    config::RunConfig one_config = single_rank_config(tiny_moe(c.steps, with(c.layout, c.ep_only)));
    one_config.train.recompute = partition::Recompute::kNone;
    const RunRecord one = train_steps(one_config, *self);
    const Comparison against_one = expect_within(parallel, one, c.one_rank);
    std::printf("[ ep-np8 ] %-34s %2lld steps: losses %.6f -> %.6f, bit-identical to ep 1; against one rank: max "
                "loss rel diff %.3g, max param rel diff %.3g (%s)",
                c.name.c_str(), static_cast<long long>(c.steps), parallel.losses.front(), parallel.losses.back(),
                against_one.loss_diff, against_one.param_diff, against_one.worst.c_str());
    if (against_one.scaled) std::printf(", scaled %.3g (%s)", against_one.scaled_diff, against_one.worst_tensor.c_str());
    std::printf("\n");
  }
  world->barrier()->wait();
}

// ep × tp with expert-dp > 1 under ZeRO against the same layout at ep 1 without ZeRO: ep 2 × tp 2 in dp 4 (expert-dp
// 2) at ZeRO-1, 2, 3 and in bf16 at ZeRO-3; ep 4 × tp 2 in dp 4 (expert-dp 1) at ZeRO-3; ep 4 × tp 2 from dp 2 × cp 2
// (the ep group spans cp and dp) at ZeRO-2.
TEST(EpEightRanks, ExpertDataParallelUnderZeroMatchesEpOneBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 8) GTEST_SKIP() << "runs at 8 ranks (ep 2 x tp 2 in dp 4)";
  constexpr std::int64_t kSteps = 10, kShort = 6;
  const std::vector<std::string> tp2_dp4 = {kTp2}, bf16 = {kTp2, "device.precision=bf16"};
  const std::vector<std::string> tp2_cp2 = {kTp2, "parallel.context_parallel_size=2"};
  const std::vector<Case> cases = {{"ep2_tp2_dp4_zero1", kSteps, tp2_dp4, {ep(2), zero(1)}},
                                   {"ep2_tp2_dp4_zero2", kSteps, tp2_dp4, {ep(2), zero(2)}},
                                   {"ep2_tp2_dp4_zero3", kSteps, tp2_dp4, {ep(2), zero(3)}},
                                   {"ep4_tp2_dp4_zero3", kSteps, tp2_dp4, {ep(4), zero(3)}},
                                   {"ep2_tp2_dp4_zero3_bf16", kShort, bf16, {ep(2), zero(3)}},
                                   {"ep4_tp2_from_dp2_cp2_zero2", kShort, tp2_cp2, {ep(4), zero(2)}}};
  std::map<std::string, RunRecord> references;
  const double grad_clip = tiny_moe(1, {}).optimizer.grad_clip;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RunRecord parallel = expect_matches_ep_one(c, *world, references, grad_clip);
    if (world->rank() == 0) {
      std::printf("[ ep-np8 ] %-26s %2lld steps: losses %.6f -> %.6f, norms %.4g -> %.4g, bit-identical to its layout "
                  "at ep 1, ZeRO-0\n",
                  c.name.c_str(), static_cast<long long>(c.steps), parallel.losses.front(), parallel.losses.back(),
                  parallel.grad_norms.front(), parallel.grad_norms.back());
    }
  }
}

}  // namespace
}  // namespace cleave::testing
