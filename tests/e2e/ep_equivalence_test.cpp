// Expert parallelism (issue 36 part 4; run under mpiexec, np 2 and 4): parallel.expert_model_parallel_size 2 and 4
// against ep 1 on the same world (same dp × cp: ep is folded out of it), in deterministic mode: the per-step losses
// and the final logical parameters must be BIT-IDENTICAL, in fp32 and bf16 mixed precision, with the softmax router
// (aux and z losses on) and the sigmoid router with a shared expert. The dispatch sends each rank's routed rows to
// their experts' ranks and back (layers/moe/expert_dispatch.hpp); its weight gradients are summed per source lane
// then canonically (pipeline/ordered_grad_accumulator.hpp), so nothing may differ in the last bit.
//
// Forced imbalance: the sigmoid router's selection bias is set so that every token picks experts 0 and 1, which live
// on ep rank 0: every other ep rank receives no rows in any dispatch (checked through the step's metrics). The run
// trains (losses finite, experts 0 and 1 move, the idle experts keep their initial values: no gradient reaches them)
// and matches ep 1 bit for bit.
//
// At np 2 also ep 2 taken from cp 2 (the ep group is the cp group: each rank routes its own tokens of every
// sample). At np 4 also ep 2 inside dp 4 (an expert-dp group of 2 reduces the expert gradients) and ep 2 × pp 2 under zb_v
// and dualpipev (the all-to-alls inside the F, I and W actions as the executor runs them), and ep 2 × tp 2 (expert
// tensor parallelism: each ep rank's experts split over tp; with and without sequence parallelism, and in bf16 with
// ZeRO-1) against tp 2 at ep 1, bit for bit.
//
// ep 2 × tp 2 against ONE rank (tp sums associate differently, so not bit-exact): within kTensorParallel, the bound
// tests/e2e/moe_equivalence_test.cpp holds tp 2 to. Checkpoints across ep × tp: saved at ep 4, loaded at ep 2 × tp 2
// (and saved at ep 2 × tp 2, loaded at ep 4), the loaded parameters equal the saved ones bit for bit and the run
// continues within kTensorParallel of the uninterrupted one-rank run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/train/collectives.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/layout_compare.hpp"
#include "support/layout_overrides.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::ep_equivalence_test {
namespace {

config::RunConfig tiny_moe(std::int64_t steps, const std::vector<std::string>& overrides) {
  return tiny_ep_moe("tiny_moe", 2, steps, overrides);
}

std::string ep(int size) { return "parallel.expert_model_parallel_size=" + std::to_string(size); }

struct Case {
  std::string name;
  int ep = 2;
  std::int64_t steps = 20;
  std::vector<std::string> overrides;
};

std::vector<Case> cases_for(int world) {
  const std::string bf16 = "device.precision=bf16", sigmoid = "model.router=sigmoid";
  const std::string shared = "model.n_shared_experts=1";
  if (world == 2) {
    return {{"ep2_fp32", 2, 20, {}},
            {"ep2_bf16", 2, 20, {bf16}},
            {"ep2_sigmoid_shared_selective", 2, 8, {sigmoid, shared, "train.recompute=selective"}},
            {"ep2_from_cp2", 2, 6, {"parallel.context_parallel_size=2"}},
            {"ep2_zero1", 2, 6, {"optimizer.zero_stage=1"}}};
  }
  if (world == 4) {
    const std::string pp2 = "parallel.pipeline_model_parallel_size=2", tp2 = "parallel.tensor_model_parallel_size=2";
    return {{"ep4_fp32", 4, 20, {}},
            {"ep4_bf16", 4, 20, {bf16}},
            {"ep2_in_dp4", 2, 10, {}},
            {"ep2_in_dp4_zero1", 2, 6, {"optimizer.zero_stage=1"}},
            {"ep2_pp2_zb_v", 2, 6, {pp2, "parallel.schedule=zb_v"}},
            {"ep2_tp2", 2, 6, {tp2}},
            {"ep2_tp2_sp_sigmoid_shared", 2, 4, {tp2, "parallel.sequence_parallel=true", sigmoid, shared}},
            {"ep2_tp2_bf16_zero1", 2, 4, {tp2, bf16, "optimizer.zero_stage=1"}},
            {"ep2_pp2_dualpipev_bf16", 2, 6, {pp2, "parallel.schedule=dualpipev", bf16}}};
  }
  return {};
}

TEST(EpEquivalence, EpTwoAndFourMatchEpOneBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  const auto cases = cases_for(world->size());
  if (cases.empty()) GTEST_SKIP() << "no cases for world size " << world->size();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> with_ep = c.overrides;
    with_ep.push_back(ep(c.ep));
    const RunRecord parallel = train_steps(tiny_moe(c.steps, with_ep), *world);
    const RunRecord reference = train_steps(tiny_moe(c.steps, c.overrides), *world);
    ASSERT_EQ(parallel.params.at("blocks.0.moe.experts.gate.weight").size(), 4u * 12u * 16u);
    expect_bit_identical(parallel, reference);
    if (world->rank() == 0) {
      std::printf("[ ep ] %-30s %lld steps: losses %.6f -> %.6f, bit-identical to ep 1\n", c.name.c_str(),
                  static_cast<long long>(c.steps), parallel.losses.front(), parallel.losses.back());
    }
  }
}

// Gradient clipping engaged on every step (grad_clip far below every step's norm): the clip factor comes from the
// global norm, whose sum of squares is exact (kernels/exact_square_sum.hpp), so it has the same bits however ep
// moves the experts out of the dp buckets (and under ZeRO-1's shards); the losses, the norms and the final parameters
// are bit-identical to ep 1. With a rounded double sum the bucket boundaries moved the norm in its last bits.
TEST(EpEquivalence, ClippedStepsMatchEpOneBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  const int size = world->size();
  if (size != 2 && size != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  constexpr double kMaxNorm = 1e-3;
  const std::string clip = "optimizer.grad_clip=" + std::to_string(kMaxNorm);
  std::vector<Case> cases = {{"ep" + std::to_string(size) + "_clipped", size, 10, {clip}},
                             {"ep2_clipped_zero1", 2, 6, {clip, "optimizer.zero_stage=1"}},
                             {"ep2_clipped_bf16", 2, 6, {clip, "device.precision=bf16"}}};
  if (size == 4) cases.push_back({"ep2_in_dp4_clipped", 2, 6, {clip}});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> with_ep = c.overrides;
    with_ep.push_back(ep(c.ep));
    const RunRecord parallel = train_steps(tiny_moe(c.steps, with_ep), *world);
    const RunRecord reference = train_steps(tiny_moe(c.steps, c.overrides), *world);
    ASSERT_EQ(reference.grad_norms.size(), static_cast<std::size_t>(c.steps));
    ASSERT_EQ(parallel.grad_norms.size(), reference.grad_norms.size());
    for (std::size_t i = 0; i < reference.grad_norms.size(); ++i) {
      EXPECT_GT(reference.grad_norms[i], 10 * kMaxNorm) << "step " << i << " did not clip";
      EXPECT_EQ(std::memcmp(&parallel.grad_norms[i], &reference.grad_norms[i], sizeof(double)), 0)
          << "step " << i << ": norm " << parallel.grad_norms[i] << " vs ep 1's " << reference.grad_norms[i];
    }
    expect_bit_identical(parallel, reference);
    if (world->rank() == 0) {
      std::printf("[ ep ] %-30s %lld clipped steps: norm %.6g -> %.6g, bit-identical to ep 1\n", c.name.c_str(),
                  static_cast<long long>(c.steps), parallel.grad_norms.front(), parallel.grad_norms.back());
    }
  }
}

// Every token routed to experts 0 and 1 (ep rank 0's): the sigmoid router's selection bias set high for them. The
// same weights go into the ep and the ep 1 run (load_weights), the bias held there (bias_update_rate 0).
RunRecord imbalanced_run(const config::RunConfig& config, comm::Communicator& world,
                         const std::map<std::string, std::vector<float>>& initial,
                         std::vector<double>* received_by_last_rank) {
  train::Trainer trainer(config, world);
  train::WeightSource source;
  source.origin = "the forced-imbalance weights";
  source.model = nlohmann::json::parse(config::to_json(config)).at("model");
  source.tensor = [&initial](const std::string& name, const std::vector<std::int64_t>&) {
    std::vector<float> v = initial.at(name);
    if (name.find("router.bias") != std::string::npos) {
      for (std::size_t e = 0; e < v.size(); ++e) v[e] = e < 2 ? 30.0f : 0.0f;
    }
    return v;
  };
  trainer.load_weights(source);
  RunRecord record;
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    const auto stats = trainer.step(s);
    record.losses.push_back(stats.loss);
    double to_last = 0, tokens_e2 = -1;
    for (const auto& [key, value] : stats.routing) {
      if (key.find("moe_ep_rows_") == 0 && key.ends_with("_d" + std::to_string(config.parallel.expert_model_parallel_size - 1))) {
        to_last += value;
      }
      if (key == "moe_tokens_e2") tokens_e2 = value;
    }
    if (received_by_last_rank != nullptr) {
      received_by_last_rank->push_back(to_last);
      double sent = 0;  // the dispatch ran: every routed row of the step went somewhere
      for (const auto& [key, value] : stats.routing) {
        if (key.find("moe_ep_rows_b0_") == 0) sent += value;
      }
      EXPECT_EQ(sent, 8.0 * 8.0 * 2.0) << "step " << s << ": global batch 8 × seq_len 8 × top_k 2 rows of block 0";
      // Per micro-batch (moe_ep_mb_*, the memory plan's figures; several micro-batches a step here): a rank sends
      // micro-batch 1 × seq_len 8 × top_k 2 = 16 rows, the mean per rank; every token's two rows go to experts 0
      // and 1, so the first rank receives twice the mean (at ep 2 both experts' rows from both ranks, at ep 4
      // expert 0's from all four), the dropless bound, and the last rank none.
      const std::string last = std::to_string(config.parallel.expert_model_parallel_size - 1);
      double mean = -1, first_rank = -1, last_rank = -1;
      for (const auto& [key, value] : stats.routing) {
        if (key == "moe_ep_mb_mean_rows_b0") mean = value;
        if (key == "moe_ep_mb_rows_b0_d0") first_rank = value;
        if (key == "moe_ep_mb_rows_b0_d" + last) last_rank = value;
      }
      EXPECT_EQ(mean, 16.0) << "step " << s;
      EXPECT_EQ(first_rank, 32.0) << "step " << s;
      EXPECT_EQ(last_rank, 0.0) << "step " << s;
    }
    EXPECT_EQ(tokens_e2, 0.0) << "step " << s << ": a token reached expert 2";
  }
  record.params = trainer.gather_parameters();
  return record;
}

TEST(EpEquivalence, ForcedImbalanceLeavesRanksWithoutTokensAndMatches) {
  auto world = make_world(/*deterministic=*/true);
  const int size = world->size();
  if (size != 2 && size != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  const std::vector<std::string> sigmoid = {"model.router=sigmoid", "model.bias_update_rate=0",
                                            "optimizer.weight_decay=0"};
  const config::RunConfig reference_config = tiny_moe(6, sigmoid);
  std::vector<std::string> with_ep = sigmoid;
  with_ep.push_back(ep(size));
  const config::RunConfig ep_config = tiny_moe(6, with_ep);
  const auto initial = train::Trainer(reference_config, *world).gather_parameters();
  std::vector<double> received;
  const RunRecord parallel = imbalanced_run(ep_config, *world, initial, &received);
  const RunRecord reference = imbalanced_run(reference_config, *world, initial, nullptr);
  expect_bit_identical(parallel, reference);
  ASSERT_EQ(received.size(), 6u);
  for (double r : received) EXPECT_EQ(r, 0.0) << "the last ep rank received rows";
  // Experts 0 and 1 trained; 2 and 3 got no gradient (AdamW's decay aside, weight_decay 0 here: unchanged).
  const auto& before = initial.at("blocks.0.moe.experts.up.weight");
  const auto& after = parallel.params.at("blocks.0.moe.experts.up.weight");
  const std::size_t per_expert = before.size() / 4;
  double moved_busy = 0, moved_idle = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    (i < 2 * per_expert ? moved_busy : moved_idle) += std::abs(after[i] - before[i]);
  }
  EXPECT_GT(moved_busy, 0.0);
  EXPECT_EQ(moved_idle, 0.0);
}

namespace fs = std::filesystem;

// Checkpoints are layout-independent: saved at ep = world size (each rank writes its experts' slice, the expert-dp
// replicas none twice), resumed at ep 1 and at the same ep, each continuing the uninterrupted ep 1 run bit for bit
// (parameters and AdamW state travel exactly); at np 4 also under ZeRO-1 with ep 2 (state in expert-dp segments).
TEST(EpCheckpoint, SavedAtEpResumesAtEpOneAndAtEp) {
  auto world = make_world(/*deterministic=*/true);
  const int size = world->size();
  if (size != 2 && size != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  constexpr std::int64_t kSteps = 4, kSaveAt = 2;
  // Plain, and ZeRO-1 at np 4 (ep 2 in dp 4: the expert state sharded over an expert-dp group of 2).
  for (const bool zero1 : {false, true}) {
    if (zero1 && size != 4) continue;
    SCOPED_TRACE(zero1 ? "zero1" : "plain");
    const int ep_size = zero1 ? 2 : size;
    const std::vector<std::string> base = zero1 ? std::vector<std::string>{"optimizer.zero_stage=1"}
                                                : std::vector<std::string>{};
    std::vector<std::string> with = base;
    with.push_back(ep(ep_size));
    const auto one = tiny_moe(kSteps, base);
    const auto with_ep = tiny_moe(kSteps, with);
    const std::string root = shared_dir(*world, "ep", zero1 ? "resume_zero1" : "resume");
    const RunRecord whole = run_from(one, *world, 0, kSteps);
    run_from(with_ep, *world, 0, kSaveAt, "", root);
    const std::string dir = step_dir(root, kSaveAt);
    for (const auto* config : {&one, &with_ep}) {
      const RunRecord rest = run_from(*config, *world, kSaveAt, kSteps, dir);
      ASSERT_EQ(rest.losses.size(), 2u);
      EXPECT_EQ(rest.losses[0], whole.losses[2]);
      EXPECT_EQ(rest.losses[1], whole.losses[3]);
      std::string worst;
      EXPECT_EQ(max_param_rel_diff(rest, whole, &worst), 0.0) << "worst " << worst;
    }
    world->barrier()->wait();
    if (world->rank() == 0) fs::remove_all(root);
  }
}

const std::string kTp2 = "parallel.tensor_model_parallel_size=2";
// Against one rank: SGD, as tests/e2e/moe_equivalence_test.cpp (AdamW's m / sqrt(v) turns a rounding difference in a
// near-zero gradient into a whole step).
const std::vector<std::string> kSgd = {"optimizer.type=sgd", "optimizer.lr=0.05"};

std::vector<std::string> sgd_with(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), kSgd.begin(), kSgd.end());
  return overrides;
}

TEST(EpTensorParallel, EpTwoTimesTpTwoMatchesOneRankWithinBound) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  auto self = world->split(world->rank(), 0, "self");
  for (const auto& [name, overrides] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"ep2_tp2", {kTp2, ep(2)}}, {"ep2_tp2_sp", {kTp2, ep(2), "parallel.sequence_parallel=true"}}}) {
    SCOPED_TRACE(name);
    const config::RunConfig config = tiny_moe(6, sgd_with(overrides));
    const RunRecord parallel = train_steps(config, *world);
    if (world->rank() != 0) continue;
    const RunRecord reference = train_steps(single_rank_config(config), *self);
    std::string worst;
    const double param_diff = max_param_rel_diff(parallel, reference, &worst);
    const double loss_diff = max_loss_rel_diff(parallel, reference);
    EXPECT_LE(loss_diff, kTensorParallel);
    EXPECT_LE(param_diff, kTensorParallel) << "worst " << worst;
    EXPECT_GT(std::abs(parallel.losses.front() - parallel.losses.back()), 0.0);  // it trained
    std::printf("[ ep ] %-30s max loss rel diff %.3g, max param rel diff %.3g against one rank\n", name.c_str(),
                loss_diff, param_diff);
  }
  world->barrier()->wait();
}

// The parameters a trainer of `config` holds after loading `dir` (no step taken).
std::map<std::string, std::vector<float>> loaded(const config::RunConfig& config, comm::Communicator& world,
                                                 const std::string& dir, std::int64_t step) {
  train::Trainer trainer(config, world);
  EXPECT_EQ(trainer.load_checkpoint(dir), step);
  return trainer.gather_parameters();
}

void expect_same_params(const std::map<std::string, std::vector<float>>& got,
                        const std::map<std::string, std::vector<float>>& want) {
  RunRecord a, b;
  a.params = got;
  b.params = want;
  expect_bit_identical(a, b);
}

TEST(EpCheckpoint, SavedAtEpFourResumesAtEpTwoTimesTpTwoAndBack) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  constexpr std::int64_t kSteps = 4, kSaveAt = 2;
  const auto ep4 = tiny_moe(kSteps, sgd_with({ep(4)}));
  const auto ep2_tp2 = tiny_moe(kSteps, sgd_with({ep(2), kTp2}));
  auto self = world->split(world->rank(), 0, "self");
  const RunRecord whole = world->rank() == 0 ? run_from(single_rank_config(ep4), *self, 0, kSteps) : RunRecord{};
  // ep 4 -> ep 2 x tp 2: the experts' [E, F, D] tensors written as four expert slices, read as two slices of each
  // tp shard.
  const std::string root = shared_dir(*world, "ep", "ep4_to_ep2tp2");
  const RunRecord saved = run_from(ep4, *world, 0, kSaveAt, "", root);
  const std::string dir = step_dir(root, kSaveAt);
  expect_same_params(loaded(ep2_tp2, *world, dir, kSaveAt), saved.params);
  const RunRecord rest = run_from(ep2_tp2, *world, kSaveAt, kSteps, dir);
  if (world->rank() == 0) {
    ASSERT_EQ(rest.losses.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(rest.losses[i], whole.losses[kSaveAt + i], kTensorParallel * std::abs(whole.losses[kSaveAt + i]));
    }
    std::string worst;
    EXPECT_LE(max_param_rel_diff(rest, whole, &worst), kTensorParallel) << "worst " << worst;
  }
  // ep 2 x tp 2 -> ep 4: the pieces of each tp shard, one per ep rank, tile it; ep 4 reads its expert slices.
  const std::string back_root = shared_dir(*world, "ep", "ep2tp2_to_ep4");
  const RunRecord saved_back = run_from(ep2_tp2, *world, 0, kSaveAt, "", back_root);
  const std::string back_dir = step_dir(back_root, kSaveAt);
  expect_same_params(loaded(ep4, *world, back_dir, kSaveAt), saved_back.params);
  world->barrier()->wait();
  if (world->rank() == 0) {
    fs::remove_all(root);
    fs::remove_all(back_root);
  }
}

// Bad input under mpiexec: ep 3 does not divide the 4 experts, refused on every rank before any work.
TEST(EpEquivalence, ExpertsNotDivisibleAreRefusedBeforeWork) {
  auto world = make_world(/*deterministic=*/true);
  try {
    tiny_moe(1, {ep(3)});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.expert_model_parallel_size"), std::string::npos) << e.what();
  }
  world->barrier()->wait();
}

}  // namespace
}  // namespace cleave::testing::ep_equivalence_test
