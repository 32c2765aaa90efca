// cleave verify's bounds beyond the floors on real one-rank runs: fp32 AdamW's per-element bound
// (engine/train/verify_adamw_bound.hpp: the order twins' gradient noise through the reference's own AdamW state)
// passes every tensor of a correct reordering and still fails half an AdamW step on one element and a gradient shard
// with its sign flipped; bf16 AdamW's per-step loss floor (train::losses_within: the twins' and the fp32 run's loss
// differences at each step) passes a reordering and fails a loss whose mean is off by one token.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/train/verify.hpp"
#include "engine/train/verify_adamw_bound.hpp"
#include "engine/train/verify_floor.hpp"
#include "train_harness.hpp"
#include "verify_harness.hpp"

namespace cleave::testing::verify_bounds_test {
namespace {

// Draw 785's model of the layout sweep (gpt d_model 32, 4 layers), one rank, AdamW lr 0.01 warming up over 2 steps.
config::RunConfig tiny_fp32_adamw() {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 8},
    "batch": {"global_batch_size": 24, "micro_batch_size": 4},
    "optimizer": {"type": "adamw", "lr": 0.01, "warmup_steps": 2},
    "train": {"steps": 4, "seed": 5, "deterministic": true, "eval_batches": 0, "out_dir": "runs/verify_bounds_test"},
    "data": {"type": "synthetic"}
  })", "tiny_fp32_adamw");
  c.resolve(1);
  return c;
}

// The tensors of `layout` that fail every rule verify_layout applies in fp32 under AdamW: --param-tolerance 1e-3, the
// order floor, the per-element bound (with or without it: `elements`).
struct Fp32Bench {
  config::RunConfig config = tiny_fp32_adamw();
  Trained reference;
  std::vector<partition::NullGradient> slices;
  double cap = 0;
  train::RoundingFloor order;
  train::ElementBound element;

  std::vector<std::string> failing(const train::ParameterMap& layout, bool elements) const {
    std::vector<std::string> out;
    for (const auto& d : train::compare_parameters(layout, reference.params, slices, cap).params) {
      if (train::tensor_within(d, 1e-3, nullptr, &order)) continue;
      const double scale = d.normalised > 0 ? d.max_abs / d.normalised : 0.0;
      const double tolerance = std::max(1e-3 * scale, order.tolerance(d.name));
      if (elements && train::element_check(d.name, layout, reference.params, element, tolerance, slices).within()) {
        continue;
      }
      out.push_back(d.name);
    }
    return out;
  }
};

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(VerifyFp32, AdamwElementBoundPassesReorderingsAndFailsInjectedErrors) {
  Fp32Bench b;
  const std::vector<config::RunConfig> twins = train::order_twins(b.config);
  if (twins.empty()) GTEST_SKIP() << "this build has one CPU GEMM library: no order twin";
  b.reference = train_one_rank(b.config, nullptr, true);
  b.slices = train::verify_null_slices(b.config);
  b.cap = train::adamw_drift_bound(b.config.optimizer, b.config.train.steps);
  std::vector<Trained> runs;
  std::vector<train::ParamComparison> compared;
  std::vector<std::pair<const train::ParameterMap*, const train::ParameterMap*>> pairs;
  for (config::RunConfig twin : twins) {
    twin.resolve(1);
    runs.push_back(train_one_rank(twin));
  }
  for (const Trained& t : runs) {
    compared.push_back(train::compare_parameters(t.params, b.reference.params, b.slices, b.cap));
    pairs.emplace_back(&t.params, &b.reference.params);
  }
  b.order = train::order_floor(compared, {}, 0, 3);
  b.element.noise = train::gradient_noise(pairs, b.reference.sensitivity, b.slices);
  b.element.sensitivity = b.reference.sensitivity;
  b.element.factor = 3;
  b.element.cap = b.cap;
  // Correct reorderings: micro-batches of 1 and of 2 (no twin sums as either), and the order twins among themselves.
  for (std::int64_t micro : {1, 2}) {
    config::RunConfig split = b.config;
    split.batch.micro_batch_size = micro;
    split.batch.gradient_accumulation_steps.reset();
    split.resolve(1);
    EXPECT_TRUE(b.failing(train_one_rank(split).params, true).empty()) << "micro-batch " << micro;
  }
  // Injected errors: half an AdamW step on element 0 of embed.position at every step; the first qkv bias's gradient
  // with its sign flipped (a wrong gradient shard).
  const InjectingBackend half = injecting(8 * 32, 1, 0.5f);
  const std::vector<std::string> half_failed = b.failing(train_one_rank(b.config, &half).params, true);
  EXPECT_TRUE(has(half_failed, "embed.position"));
  const InjectingBackend flipped = injecting(3 * 32, -1, 0);
  const std::vector<std::string> flip_failed = b.failing(train_one_rank(b.config, &flipped).params, true);
  EXPECT_TRUE(has(flip_failed, "blocks.0.attn.qkv.bias"));
  std::printf("[ verify ] fp32 AdamW per-element bound, d_model 32 gpt: embed.position's noise %.3g, half a step fails "
              "%zu tensors, a flipped qkv bias gradient %zu\n",
              b.element.noise.count("embed.position") ? b.element.noise.at("embed.position") : 0.0,
              half_failed.size(), flip_failed.size());
}

// A bf16 gpt at the sweep's lr 0.01 under AdamW (draw 196's kind), 4 steps.
config::RunConfig tiny_bf16_adamw() {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 4},
    "optimizer": {"type": "adamw", "lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 4, "seed": 3, "deterministic": true, "eval_batches": 0, "out_dir": "runs/verify_bounds_test"},
    "data": {"type": "synthetic"},
    "device": {"precision": "bf16"}
  })", "tiny_bf16_adamw");
  c.resolve(1);
  return c;
}

TEST(VerifyBf16, AdamwLossFloorPassesAReorderingAndFailsALossMeanOverOneTokenTooFew) {
  const config::RunConfig c = tiny_bf16_adamw();
  const std::vector<config::RunConfig> twins = train::twin_references(c);
  if (twins.empty()) GTEST_SKIP() << "this build has one CPU GEMM library: no twin";
  const Trained reference = train_one_rank(c);
  std::vector<double> floor;
  for (const config::RunConfig& twin : twins) {
    floor = train::largest_per_step(floor, train::loss_differences(train_one_rank(twin).losses, reference.losses));
  }
  floor = train::largest_per_step(
      floor, train::loss_differences(train_one_rank(*train::precision_twin(c)).losses, reference.losses));
  floor[0] = 0;  // as verify_layout: step 1 comes before any update
  const double tolerance = train::default_loss_tolerance(c), factor = 3;
  // A reordering no twin runs: the reference's own GEMM library with attention's key blocks halved (twin 1 halves them
  // with the other library, twin 2 quarters them), its micro-batches of 2 (the weight gradients summed in another order).
  config::RunConfig split = c;
  split.device.attention_sums = ops::AttentionSums::kReordered;
  split.batch.micro_batch_size = 2;
  split.batch.gradient_accumulation_steps.reset();
  split.resolve(1);
  const Trained reordered = train_one_rank(split);
  EXPECT_TRUE(train::losses_within(reordered.losses, reference.losses, tolerance, floor, factor));
  // A loss mean over N - 1 of the step's N = 128 tokens: every loss 128 / 127 of its value, 7.9e-3 too large.
  InjectingBackend off_by_one = injecting(0, 1, 0);
  off_by_one.cross_entropy_forward = &injected_loss;
  off_by_one.loss_scale = 128.0f / 127.0f;
  const Trained off = train_one_rank(c, &off_by_one);
  EXPECT_FALSE(train::losses_within(off.losses, reference.losses, tolerance, floor, factor));
  // Step 1 alone fails it (held to u / sqrt(N)); so do the steps after it, where the floor applies.
  const auto after_step_1 = [](const std::vector<double>& v) { return std::vector<double>(v.begin() + 1, v.end()); };
  EXPECT_FALSE(train::losses_within(after_step_1(off.losses), after_step_1(reference.losses), tolerance,
                                    after_step_1(floor), factor));
  EXPECT_TRUE(train::losses_within(after_step_1(reordered.losses), after_step_1(reference.losses), tolerance,
                                   after_step_1(floor), factor));
  std::printf("[ verify ] bf16 AdamW loss floor, d_model 32 gpt at lr 0.01: the floor per step %.3g %.3g %.3g (x %g), "
              "the reordering's largest %.3g, the default tolerance %.3g\n",
              floor.size() > 1 ? floor[1] : 0.0, floor.size() > 2 ? floor[2] : 0.0, floor.size() > 3 ? floor[3] : 0.0,
              factor, train::max_loss_difference(reordered.losses, reference.losses), tolerance);
}

}  // namespace
}  // namespace cleave::testing::verify_bounds_test
