// model.type moe under every layout (run under mpiexec, np 2 and 4): tensor parallel (Megatron's expert tensor
// parallelism: every expert's SwiGLU split), sequence parallelism, every pipeline schedule (with full and
// selective recomputation), data parallel with ZeRO 1-3, and bf16 mixed precision each give the per-step
// losses and final parameters of ONE rank from the same seed (the reference runs inside rank 0 on a
// communicator of its own), as tests/e2e/llama_equivalence_test.cpp does for llama. The model is tiny: 4
// experts, top-2, a softmax router with the load-balancing and z losses on (so their gradients' scaling is
// checked on every layout), and a sigmoid-router variant with a shared expert.
//
// Tolerances are llama's (the reasons are in llama_equivalence_test.cpp and pipeline_equivalence_test.cpp):
// pipeline splits in deterministic mode bit-identical; sums that associate differently (data parallel, ZeRO)
// within kRounding; tensor parallel within kTensorParallel. Routing is a discontinuous function of the
// logits, but a difference of 1e-6 flips a token only if two of its experts score within 1e-6 of each other;
// the seeds here have no such token (a flip would show as a loss difference far above the tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mpi/mpi_test_env.hpp"
#include "train_harness.hpp"

namespace cleave::testing {
namespace {

constexpr double kRounding = 5e-6;
constexpr double kTensorParallel = 2e-5;
constexpr double kBf16TensorParallel = 3e-2;  // max |diff| / the tensor's largest magnitude
constexpr double kBf16TensorParallelLoss = 1e-3;

struct Layout {
  std::string name;
  std::vector<std::string> overrides;
  double tolerance;  // 0 = bit-identical
  bool bf16 = false;
};

config::RunConfig tiny_moe(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"train.steps=4"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_config(R"({
    "model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 4, "n_heads": 2, "n_kv_heads": 2,
              "seq_len": 8, "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2, "aux_loss_coef": 0.05,
              "z_loss_coef": 0.01},
    "batch": {"global_batch_size": 4, "micro_batch_size": 1},
    "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "grad_clip": 0.0, "warmup_steps": 0},
    "train": {"seed": 5, "deterministic": true, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", "tiny_moe", all);
}

std::vector<Layout> layouts_for(int world) {
  auto pp = [](int p) { return "parallel.pipeline_model_parallel_size=" + std::to_string(p); };
  auto tp = [](int t) { return "parallel.tensor_model_parallel_size=" + std::to_string(t); };
  auto schedule = [](const char* name) { return std::string("parallel.schedule=") + name; };
  const std::string sp = "parallel.sequence_parallel=true", bf16 = "device.precision=bf16";
  const std::string sigmoid = "model.router=sigmoid", shared = "model.n_shared_experts=1";
  if (world == 2) {
    return {{"tp2", {tp(2)}, kTensorParallel},
            {"tp2_sp", {tp(2), sp}, kTensorParallel},
            {"tp2_sp_sigmoid_shared_selective", {tp(2), sp, sigmoid, shared, "train.recompute=selective"},
             kTensorParallel},
            {"pp2_gpipe", {pp(2), schedule("gpipe")}, 0},
            {"pp2_1f1b", {pp(2)}, 0},
            {"pp2_interleaved", {pp(2), schedule("interleaved_1f1b"), "parallel.virtual_pipeline_stages=2"}, 0},
            {"pp2_zb_h1_full_recompute", {pp(2), schedule("zb_h1"), "train.recompute=full"}, 0},
            {"pp2_zb_h2", {pp(2), schedule("zb_h2")}, 0},
            {"pp2_zb_v_sigmoid_shared", {pp(2), schedule("zb_v"), sigmoid, shared}, 0},
            {"pp2_dualpipev", {pp(2), schedule("dualpipev")}, 0},
            {"dp2_zero0", {"batch.micro_batch_size=1"}, kRounding},
            {"dp2_zero1", {"batch.micro_batch_size=1", "optimizer.zero_stage=1"}, kRounding},
            {"dp2_zero2", {"batch.micro_batch_size=1", "optimizer.zero_stage=2"}, kRounding},
            {"dp2_zero3", {"batch.micro_batch_size=1", "optimizer.zero_stage=3"}, kRounding},
            {"bf16_pp2_zb_h1", {pp(2), schedule("zb_h1"), bf16}, 0, true},
            {"bf16_tp2", {tp(2), bf16}, kBf16TensorParallel, true}};
  }
  if (world == 4) {
    return {{"tp2_pp2_1f1b", {tp(2), pp(2)}, kTensorParallel},
            {"tp2_sp_dp2_zero1", {tp(2), sp, "optimizer.zero_stage=1"}, kTensorParallel},
            {"dp2_pp2_zero3_zb_h1_full_recompute",
             {pp(2), schedule("zb_h1"), "optimizer.zero_stage=3", "train.recompute=full"}, kRounding}};
  }
  return {};
}

TEST(MoeEquivalence, EveryLayoutMatchesOneRank) {
  auto world = make_world(/*deterministic=*/true);
  auto self = world->split(world->rank(), 0, "self");
  const auto layouts = layouts_for(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no layouts for world size " << world->size();
  for (const auto& layout : layouts) {
    SCOPED_TRACE(layout.name);
    const auto config = tiny_moe(layout.overrides);
    const RunRecord parallel = train_steps(config, *world);
    if (world->rank() != 0) continue;
    auto one = single_rank_config(config);
    one.train.recompute = partition::Recompute::kNone;  // the plain block is the reference
    const RunRecord reference = train_steps(one, *self);
    ASSERT_EQ(parallel.losses.size(), reference.losses.size());
    ASSERT_EQ(parallel.params.count("blocks.0.moe.experts.gate.weight"), 1u);
    EXPECT_EQ(parallel.params.at("blocks.0.moe.experts.gate.weight").size(), 4u * 12u * 16u);
    std::string worst;
    const double param_diff = max_param_rel_diff(parallel, reference, &worst);
    const double loss_diff = max_loss_rel_diff(parallel, reference);
    if (layout.tolerance == 0 && !layout.bf16) {
      for (std::size_t i = 0; i < parallel.losses.size(); ++i) {
        EXPECT_EQ(parallel.losses[i], reference.losses[i]) << "step " << i;
      }
      EXPECT_EQ(param_diff, 0.0) << "worst " << worst;
    } else if (layout.bf16) {
      std::string worst_tensor;
      EXPECT_LE(loss_diff, kBf16TensorParallelLoss);
      EXPECT_LE(max_scaled_param_diff(parallel, reference, &worst_tensor), kBf16TensorParallel) << worst_tensor;
    } else {
      EXPECT_LE(loss_diff, layout.tolerance);
      EXPECT_LE(param_diff, layout.tolerance) << "worst " << worst;
    }
    std::printf("[ moe ] %-34s max loss rel diff %.3g, max param rel diff %.3g (%s)\n", layout.name.c_str(), loss_diff,
                param_diff, worst.c_str());
  }
}

}  // namespace
}  // namespace cleave::testing
