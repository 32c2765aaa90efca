// cleave verify's bf16 noise floor (engine/train/verify_floor.hpp) on real one-rank runs of a tiny GPT: the twin
// references (another CPU GEMM library, attention's sums reordered two ways) measure how far the same run ends from
// itself with its sums in other orders (the largest over the three pairs of runs); a correct reordering passes within
// 3 x that floor (on the default gpt at three seeds, a third GEMM library too), and an injected error fails: half a step (lr / 2) added to one
// element at every step under AdamW and SGD, and under SGD a quarter too much gradient on one bias.
// The errors are injected through the trainer's test backend (Trainer's `backend`): the CPU table with the optimizer
// slots wrapped. Also what the floor cannot see: AdamW normalises a whole tensor's gradient scale away.
// The loss bound of a bf16 tp 2 layout (default_loss_tolerance, sqrt(2) u / sqrt(N)) still fails a loss whose mean
// divides by one token too few, and passes the twin's losses. The precision twin (the reference in fp32) on a
// d_model 32 gpt whose GEMM twin shows no floor: a reordering passes, the same injected errors fail.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/train/verify.hpp"
#include "engine/train/verify_floor.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "mpi/mpi_test_env.hpp"
#include "train_harness.hpp"
#include "verify_harness.hpp"

namespace cleave::testing::verify_bf16_test {
namespace {

// Update items by their element count in the model below: embed.position (seq_len x d_model) and the first
// block's attn.qkv.bias (3 x d_model; the first of its size an update call holds).
constexpr std::int64_t kPosition = 64 * 128, kQkvBias = 3 * 128;

// The default gpt's recipe (examples/gpt_fortunes.json: AdamW, warmup over 30 steps) on a tiny model, bf16, 10 steps.
config::RunConfig tiny_bf16(const std::string& optimizer) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4, "seq_len": 64},
    "batch": {"global_batch_size": 16, "micro_batch_size": 8},
    "optimizer": {"lr": 0.002, "weight_decay": 0.1, "betas": [0.9, 0.95], "warmup_steps": 30},
    "train": {"steps": 10, "seed": 5, "deterministic": true, "eval_batches": 0, "out_dir": "runs/verify_bf16_test"},
    "data": {"type": "synthetic"},
    "device": {"precision": "bf16"}
  })", "tiny_bf16", {"optimizer.type=" + optimizer});
  c.resolve(1);
  return c;
}

// The reference, its twin's floor, and the verdict on a "layout" run, as verify_layout decides it.
struct Bench {
  config::RunConfig config;
  Trained reference;
  train::NoiseFloor floor;
  std::vector<partition::NullGradient> null_slices;
  double null_bound = 0;

  // A correct reordering of the reference: its micro-batches halved (the weight gradients summed in another order).
  train::ParameterMap reordered() const {
    config::RunConfig split = config;
    split.batch.micro_batch_size = *config.batch.micro_batch_size / 2;
    split.batch.gradient_accumulation_steps.reset();
    split.resolve(1);
    return train_one_rank(split).params;
  }

  // The tensors of `layout` that fail (neither within 1e-3 normalised nor within the floor's tolerance).
  std::vector<std::string> failing(const train::ParameterMap& layout) const {
    std::vector<std::string> out;
    const auto c = train::compare_parameters(layout, reference.params, null_slices, null_bound, &reference.initial);
    for (const auto& d : c.params) {
      if (!train::tensor_within(d, 1e-3, &floor)) out.push_back(d.name);
    }
    return out;
  }
};

std::optional<Bench> bench(const std::string& optimizer) {
  Bench b;
  b.config = tiny_bf16(optimizer);
  const std::vector<config::RunConfig> twins = train::twin_references(b.config);
  if (twins.empty()) return std::nullopt;
  b.reference = train_one_rank(b.config);
  b.null_slices = train::verify_null_slices(b.config);
  b.null_bound = train::adamw_drift_bound(b.config.optimizer, b.config.train.steps);
  std::vector<train::ParameterMap> params;
  std::vector<std::string> described;
  for (const config::RunConfig& twin : twins) {
    params.push_back(train_one_rank(twin).params);
    described.push_back(train::describe_twin(b.config, twin));
  }
  b.floor = train::noise_floor(
      train::floor_pairs(b.reference.params, b.reference.initial, params, b.null_slices, b.null_bound), 0,
      std::move(described), 3, 1, train::adamw_flip_fraction(b.config.optimizer, b.config.train.steps));
  return b;
}

TEST(VerifyBf16, AdamwFloorPassesAReorderingAndFailsHalfAStepOnOneElement) {
  const std::optional<Bench> b = bench("adamw");
  if (!b) GTEST_SKIP() << "this build has one CPU GEMM library: no twin reference";
  // The floor is bf16 rounding amplified by AdamW (5.1e-2 of a movement measured), not nothing and not everything.
  EXPECT_GT(b->floor.floor, 1e-2) << b->floor.worst;
  EXPECT_LT(b->floor.floor, 0.15) << b->floor.worst;
  std::printf("[ verify ] d_model 128 gpt, AdamW: floor %.3g (%s, %s), flip %.3g, tolerance %.3g\n", b->floor.floor,
              b->floor.pair.c_str(), b->floor.worst.c_str(), b->floor.flip, b->floor.tolerance());
  EXPECT_TRUE(b->failing(b->reordered()).empty());
  // A third GEMM library, where built: an equivalent computation the fixed 1e-3 of a tensor's scale fails (AdamW
  // amplifies its bf16 roundings like the twin's) and the floor passes.
  if (ops::cpu_blas_built(ops::CpuBlas::kBlis) && ops::cpu_blas_built(ops::CpuBlas::kOneDnn)) {
    config::RunConfig blis = b->config;
    blis.device.blas = ops::CpuBlas::kBlis;
    const train::ParameterMap third = train_one_rank(blis).params;
    EXPECT_GT(train::compare_parameters(third, b->reference.params, b->null_slices, b->null_bound).max_param_difference,
              1e-3);
    EXPECT_TRUE(b->failing(third).empty());
  }
  // Half a step added to one element at every step: embed.position alone fails.
  const InjectingBackend half = injecting(kPosition, 1, 0.5f);
  EXPECT_EQ(b->failing(train_one_rank(b->config, &half).params), std::vector<std::string>{"embed.position"});
  // AdamW divides each element's gradient by its own rms: a whole tensor's gradient scaled by 1.25 leaves its update
  // unchanged up to eps, so no parameter comparison can see it (SGD can: below).
  const InjectingBackend scaled = injecting(kPosition, 1.25f, 0);
  EXPECT_TRUE(b->failing(train_one_rank(b->config, &scaled).params).empty());
}

// The floor is a statistic of a chaotic process, so one seed proves little. On the default gpt (no config: d_model 64,
// 2 layers, 32 tokens, AdamW warming up over 10 steps), 10 steps, bf16, at three seeds: a third GEMM library, blis
// with the bf16 kernel's attention (an equivalent run neither twin is), passes on the floor alone; half a step on one
// element of embed.position at every step fails that tensor alone. Each seed is 5 one-rank runs of that small model.
TEST(VerifyBf16, AdamwFloorOfThreePairsHoldsAtSeveralSeeds) {
  if (!ops::cpu_blas_built(ops::CpuBlas::kBlis) || !ops::cpu_blas_built(ops::CpuBlas::kOneDnn)) {
    GTEST_SKIP() << "needs three CPU GEMM libraries: onednn and openblas for the twins, blis for the layout";
  }
  for (const std::uint64_t seed : {1u, 6u, 7u}) {
    config::RunConfig c = config::parse_config("{}", "default_gpt",
                                               {"device.precision=bf16", "train.steps=10", "train.deterministic=true",
                                                "train.eval_batches=0", "train.out_dir=runs/verify_bf16_test",
                                                "train.seed=" + std::to_string(seed)});
    c.resolve(1);
    Bench b;
    b.config = c;
    b.reference = train_one_rank(c);
    b.null_slices = train::verify_null_slices(c);
    b.null_bound = train::adamw_drift_bound(c.optimizer, c.train.steps);
    std::vector<train::ParameterMap> twins;
    for (const config::RunConfig& twin : train::twin_references(c)) twins.push_back(train_one_rank(twin).params);
    ASSERT_EQ(twins.size(), 2u);
    b.floor = train::noise_floor(
        train::floor_pairs(b.reference.params, b.reference.initial, twins, b.null_slices, b.null_bound), 0, {"1", "2"},
        3, 1, train::adamw_flip_fraction(c.optimizer, c.train.steps));
    EXPECT_GT(b.floor.floor, 1e-3) << seed;
    EXPECT_LT(b.floor.tolerance(), 0.5) << seed;  // below the injected error's movement, or it could not fail
    config::RunConfig blis = c;
    blis.device.blas = ops::CpuBlas::kBlis;
    const train::ParameterMap third = train_one_rank(blis).params;
    double largest = 0;
    for (const auto& d : train::compare_parameters(third, b.reference.params, b.null_slices, b.null_bound,
                                                   &b.reference.initial).params) {
      EXPECT_LE(d.moved, b.floor.tolerance()) << seed << ": " << d.name;  // on the floor, not the fixed tolerance
      largest = std::max(largest, d.moved);
    }
    const InjectingBackend half = injecting(32 * 64, 1, 0.5f);  // embed.position (seq_len x d_model)
    EXPECT_EQ(b.failing(train_one_rank(c, &half).params), std::vector<std::string>{"embed.position"}) << seed;
    std::printf("[ verify ] default gpt, seed %llu: pairs %.3g %.3g %.3g, flip %.3g, tolerance %.3g; blis %.3g\n",
                static_cast<unsigned long long>(seed), b.floor.pairs[0].largest, b.floor.pairs[1].largest,
                b.floor.pairs[2].largest, b.floor.flip, b.floor.tolerance(), largest);
  }
}

TEST(VerifyBf16, SgdFailsHalfAStepOnOneElementAndAQuarterTooMuchGradientOnOneBias) {
  const std::optional<Bench> b = bench("sgd");
  if (!b) GTEST_SKIP() << "this build has one CPU GEMM library: no twin reference";
  EXPECT_GT(b->floor.floor, 0);
  EXPECT_TRUE(b->failing(b->reordered()).empty());
  const InjectingBackend half = injecting(kPosition, 1, 0.5f);
  EXPECT_EQ(b->failing(train_one_rank(b->config, &half).params), std::vector<std::string>{"embed.position"});
  // A quarter too much gradient on the first qkv bias: that bias fails, and through the forward the tensors after it.
  const InjectingBackend scaled = injecting(kQkvBias, 1.25f, 0);
  const std::vector<std::string> failed = b->failing(train_one_rank(b->config, &scaled).params);
  EXPECT_NE(std::find(failed.begin(), failed.end(), "blocks.0.attn.qkv.bias"), failed.end());
}

}  // namespace
}  // namespace cleave::testing::verify_bf16_test

namespace cleave::testing::verify_bf16_test {
namespace {

// The precision twin (the reference in fp32, verify_floor.hpp's RoundingFloor) on the d_model 32 gpt of
// benchmarks/verify/RESULTS-2026-11-29-matrix.md (SGD with momentum, 6 steps), where the GEMM twin shows no floor:
// a correct reordering passes; half a step on one element of embed.position and a quarter too much gradient on the
// first qkv bias fail on those tensors (and the latter on the tensors after it), within 3 x the precision twin's
// own difference on every tensor. (The tp 2 layout itself passes through the CLI: tests/e2e/cli_verify.sh.)
TEST(VerifyBf16, PrecisionTwinPassesAReorderingOfTheTinyModelAndFailsInjectedErrors) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": 0.2, "weight_decay": 0.05},
    "train": {"steps": 6, "seed": 5, "deterministic": true, "eval_batches": 0, "out_dir": "runs/verify_bf16_test"},
    "data": {"type": "synthetic"},
    "device": {"precision": "bf16"}
  })", "tiny_matrix_gpt");
  c.resolve(1);
  const Trained reference = train_one_rank(c);
  const std::optional<config::RunConfig> fp32 = train::precision_twin(c);
  ASSERT_TRUE(fp32.has_value());
  EXPECT_EQ(fp32->device.precision, ops::Precision::kFp32);
  const train::RoundingFloor rounding = train::rounding_floor(
      train::compare_parameters(train_one_rank(*fp32).params, reference.params, {}, 0), 0, 3);
  const auto failing = [&](const train::ParameterMap& layout) {
    std::vector<std::string> out;
    for (const auto& d : train::compare_parameters(layout, reference.params, {}, 0).params) {
      if (!train::tensor_within(d, 1e-3, nullptr, &rounding)) out.push_back(d.name);
    }
    return out;
  };
  config::RunConfig split = c;
  split.batch.micro_batch_size = 1;
  split.batch.gradient_accumulation_steps.reset();
  split.resolve(1);
  EXPECT_TRUE(failing(train_one_rank(split).params).empty());
  const InjectingBackend half = injecting(16 * 32, 1, 0.5f);  // embed.position (seq_len x d_model)
  const std::vector<std::string> half_failed = failing(train_one_rank(c, &half).params);
  EXPECT_NE(std::find(half_failed.begin(), half_failed.end(), "embed.position"), half_failed.end());
  const InjectingBackend scaled = injecting(3 * 32, 1.25f, 0);  // the first qkv bias
  const std::vector<std::string> failed = failing(train_one_rank(c, &scaled).params);
  EXPECT_NE(std::find(failed.begin(), failed.end(), "blocks.0.attn.qkv.bias"), failed.end());
  std::printf("[ verify ] precision twin, d_model 32 gpt: half a step on embed.position fails %zu tensors, a quarter "
              "too much qkv bias gradient %zu\n", half_failed.size(), failed.size());
}

// fp32 AdamW's order floor (verify_floor.hpp's order_twins) on the d_model 32 gpt of the layout sweep's draw 785
// (AdamW lr 0.01 warming up over 2 steps, 4 steps): the reference again with each other GEMM library bounds each
// tensor by its own difference (and its micro-batches halved, 4 to 2); a correct reordering (micro-batches of 1, which
// no twin sums as) passes, half a step on one element of
// embed.position fails that tensor, and a sign-flipped gradient on the first qkv bias (a wrong gradient shard:
// AdamW cannot hide a sign) fails it.
TEST(VerifyFp32, AdamwOrderFloorPassesAReorderingAndFailsInjectedErrors) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 8},
    "batch": {"global_batch_size": 24, "micro_batch_size": 4},
    "optimizer": {"type": "adamw", "lr": 0.01, "warmup_steps": 2},
    "train": {"steps": 4, "seed": 5, "deterministic": true, "eval_batches": 0, "out_dir": "runs/verify_bf16_test"},
    "data": {"type": "synthetic"}
  })", "tiny_fp32_adamw");
  c.resolve(1);
  const std::vector<config::RunConfig> twins = train::order_twins(c);
  if (twins.empty()) GTEST_SKIP() << "this build has one CPU GEMM library: no order twin";
  const Trained reference = train_one_rank(c);
  const auto slices = train::verify_null_slices(c);
  const double bound = train::adamw_drift_bound(c.optimizer, c.train.steps);
  std::vector<train::ParamComparison> compared;
  std::vector<std::string> described;
  for (config::RunConfig twin : twins) {
    twin.resolve(1);  // the micro-batch twin leaves its accumulation steps to resolve
    compared.push_back(train::compare_parameters(train_one_rank(twin).params, reference.params, slices, bound));
    described.push_back(train::describe_twin(c, twin));
  }
  const train::RoundingFloor order = train::order_floor(compared, described, 0, 3);
  const auto failing = [&](const train::ParameterMap& layout) {
    std::vector<std::string> out;
    for (const auto& d : train::compare_parameters(layout, reference.params, slices, bound).params) {
      if (!train::tensor_within(d, 1e-3, nullptr, &order)) out.push_back(d.name);
    }
    return out;
  };
  config::RunConfig split = c;
  split.batch.micro_batch_size = 1;
  split.batch.gradient_accumulation_steps.reset();
  split.resolve(1);
  EXPECT_TRUE(failing(train_one_rank(split).params).empty());
  const InjectingBackend half = injecting(8 * 32, 1, 0.5f);  // embed.position (seq_len x d_model)
  const std::vector<std::string> half_failed = failing(train_one_rank(c, &half).params);
  EXPECT_NE(std::find(half_failed.begin(), half_failed.end(), "embed.position"), half_failed.end());
  const InjectingBackend flipped = injecting(3 * 32, -1, 0);  // the first qkv bias
  const std::vector<std::string> flip_failed = failing(train_one_rank(c, &flipped).params);
  EXPECT_NE(std::find(flip_failed.begin(), flip_failed.end(), "blocks.0.attn.qkv.bias"), flip_failed.end());
  std::printf("[ verify ] fp32 AdamW order floor, d_model 32 gpt: embed.position's floor %.3g, half a step fails %zu "
              "tensors, a flipped qkv bias gradient %zu\n", order.tolerance("embed.position"), half_failed.size(),
              flip_failed.size());
}

TEST(VerifyBf16, Tp2LossBoundFailsALossMeanOverOneTokenTooFew) {
  config::RunConfig c = tiny_bf16("sgd");
  c.train.steps = 3;
  config::RunConfig tp2 = c;
  tp2.parallel.tensor_model_parallel_size = 2;
  tp2.parallel.data_parallel_size = -1;
  tp2.resolve(2);
  const double tolerance = train::default_loss_tolerance(tp2);  // sqrt(2) x 2^-8 / sqrt(16 x 64) = 1.73e-4
  EXPECT_NEAR(tolerance, 1.73e-4, 1e-6);
  const Trained reference = train_one_rank(c);
  // An off-by-one token count in the mean: every loss N / (N - 1) of its value, 9.8e-4 too large.
  InjectingBackend off_by_one = injecting(0, 1, 0);
  off_by_one.cross_entropy_forward = &injected_loss;
  off_by_one.loss_scale = 1024.0f / 1023.0f;
  EXPECT_GT(train::max_loss_difference(train_one_rank(c, &off_by_one).losses, reference.losses), tolerance);
  for (const config::RunConfig& twin : train::twin_references(c)) {
    EXPECT_LE(train::max_loss_difference(train_one_rank(twin).losses, reference.losses), tolerance);
  }
}

}  // namespace
}  // namespace cleave::testing::verify_bf16_test
