// The fused attention kernels' published rates by pass (profile key attention_rates, partition/attention_rates.hpp):
// a lookup returns the recorded FlashAttention-3 figure at a tabulated point and interpolates in log T between two; forward and
// backward are priced separately; a table without the asked (kernel, pass, mask, head dim) is refused by name; a
// run that names its kernel (HardwareProfile::attention_kernel) prices block_work's attention products at those rates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "partition/attention_rates.hpp"
#include "partition/block_work.hpp"
#include "partition/hardware_profile.hpp"
#include "partition/families/gpt.hpp"

namespace cleave::partition::attention_rates_test {
namespace {

HardwareProfile h100() { return load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json"); }

std::string refusal_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The shipped H100 table holds FlashAttention-3's figure values (Figures 5 and 6 of arXiv 2407.08608): cuDNN's causal
// forward at head dim 128 and T 4096 is 518 TFLOP/s, its backward 499, FA3's non-causal forward 638.
TEST(AttentionRates, ShippedH100TableReturnsTheRecordedFigureValues) {
  const HardwareProfile p = h100();
  const AttentionRates& r = p.attention_rates;
  ASSERT_FALSE(r.empty());
  EXPECT_DOUBLE_EQ(r.flops_per_s("cudnn", AttentionPass::kForward, true, 128, 4096), 518e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("cudnn", AttentionPass::kForward, false, 128, 4096), 609e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("cudnn", AttentionPass::kBackward, false, 128, 4096), 499e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("cudnn", AttentionPass::kBackward, true, 128, 4096), 499e12);  // mask "any"
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash3", AttentionPass::kForward, false, 128, 4096), 638e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash3", AttentionPass::kBackward, false, 64, 16384), 474e12);
  // Between 2k (484) and 4k (518) at the geometric middle: the mean; past the ends, the ends.
  EXPECT_NEAR(r.flops_per_s("cudnn", AttentionPass::kForward, true, 128, std::sqrt(2048.0 * 4096.0)), 501e12, 1e6);
  EXPECT_DOUBLE_EQ(r.flops_per_s("cudnn", AttentionPass::kForward, true, 128, 256), 315e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("cudnn", AttentionPass::kForward, true, 128, 65536), 539e12);
}


// The shipped A100 table holds FlashAttention-2's figure values (Figures 5 and 6 of arXiv 2307.08691, A100 80GB SXM4),
// with a causal backward of its own (no mask "any"): FA2's causal head-dim-128 forward at 8k is 200 TFLOP/s, its
// backward 176, non-causal 193; xformers' and Triton's kernels have both passes too, and so does PyTorch's standard
// attention (forward 60 and backward 86 TFLOP/s at head dim 128, T 2k, without the mask).
TEST(AttentionRates, ShippedA100TableReturnsTheFlashAttention2PapersFigureValues) {
  const HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  const AttentionRates& r = p.attention_rates;
  ASSERT_FALSE(r.empty());
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash2", AttentionPass::kForward, true, 128, 8192), 200e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash2", AttentionPass::kBackward, true, 128, 8192), 176e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash2", AttentionPass::kBackward, false, 128, 8192), 193e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash2", AttentionPass::kForward, false, 64, 512), 178e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("xformers", AttentionPass::kBackward, true, 64, 4096), 62e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("triton", AttentionPass::kBackward, false, 128, 16384), 81e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("flash1", AttentionPass::kForward, true, 128, 2048), 65e12);
  // PyTorch's standard attention (unfused; out of memory at 16k, so its curves end at 8k and stay flat past it).
  EXPECT_DOUBLE_EQ(r.flops_per_s("pytorch", AttentionPass::kForward, false, 128, 2048), 60e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("pytorch", AttentionPass::kBackward, false, 128, 2048), 86e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s("pytorch", AttentionPass::kBackward, false, 64, 16384), 51e12);
  // Every rate is below the A100's 312 TFLOP/s peak.
  for (const AttentionRates::Curve& c : r.curves()) {
    for (const auto& [t, tflops] : c.points) EXPECT_LT(tflops, 312.0) << c.kernel << " " << t;
  }
}
// An incomplete table is refused by name: Triton has no published backward, no kernel has head dim 96.
TEST(AttentionRates, IncompleteTableIsRefusedByName) {
  const AttentionRates& r = h100().attention_rates;
  const std::string no_backward = refusal_of([&] { r.flops_per_s("triton", AttentionPass::kBackward, true, 128, 4096); });
  EXPECT_NE(no_backward.find("no curve for kernel 'triton' backward mask 'causal' head dim 128"), std::string::npos)
      << no_backward;
  const std::string no_dim = refusal_of([&] { r.flops_per_s("cudnn", AttentionPass::kForward, true, 96, 4096); });
  EXPECT_NE(no_dim.find("head dim 96"), std::string::npos) << no_dim;
  EXPECT_NE(no_dim.find("forward causal 128"), std::string::npos) << no_dim;  // says what the table has
  const std::string no_kernel = refusal_of([&] { r.flops_per_s("xformers", AttentionPass::kForward, true, 128, 4096); });
  EXPECT_NE(no_kernel.find("the table has for 'xformers': nothing"), std::string::npos) << no_kernel;
}

// An unfused kernel between two published head dims (PyTorch's standard attention in the FlashAttention-2 benchmark:
// 64 and 128): each head's time per 4·T² of work, d / rate, is linear in d, so at 96 the rate is 96 over the mean of
// 64 / r64 and 128 / r128 at the same T (forward, T 2048: 35 and 60 -> 48.5 TFLOP/s; backward: 48 and 86 -> 68.0),
// between the two; a published head dim is its own curve; below 64 or above
// 128 nothing is extrapolated (refused by name); the fused kernels' exact lookup still refuses 96.
TEST(AttentionRates, UnfusedRateBetweenPublishedHeadDimsIsLinearInTimePerHead) {
  const AttentionRates& r = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json").attention_rates;
  const double forward = r.flops_per_s_between_head_dims("pytorch", AttentionPass::kForward, false, 96, 2048);
  EXPECT_NEAR(forward, 96.0 / (0.5 * (64.0 / 35e12 + 128.0 / 60e12)), 1.0);
  EXPECT_NEAR(forward / 1e12, 48.46, 0.01);
  const double backward = r.flops_per_s_between_head_dims("pytorch", AttentionPass::kBackward, false, 96, 2048);
  EXPECT_NEAR(backward / 1e12, 96.0 / (0.5 * (64.0 / 48 + 128.0 / 86)), 1e-9);
  EXPECT_NEAR(backward / 1e12, 68.04, 0.01);
  EXPECT_GT(backward, 48e12);
  EXPECT_LT(backward, 86e12);
  // A quarter of the way from 64 (80): time per head a quarter of the way from 64 / r64 to 128 / r128, at T 1024.
  EXPECT_NEAR(r.flops_per_s_between_head_dims("pytorch", AttentionPass::kForward, false, 80, 1024) / 1e12,
              80.0 / (64.0 / 34 + 0.25 * (128.0 / 56 - 64.0 / 34)), 1e-9);
  EXPECT_DOUBLE_EQ(r.flops_per_s_between_head_dims("pytorch", AttentionPass::kForward, false, 128, 2048), 60e12);
  EXPECT_DOUBLE_EQ(r.flops_per_s_between_head_dims("pytorch", AttentionPass::kBackward, false, 64, 16384), 51e12);
  const std::string above = refusal_of(
      [&] { r.flops_per_s_between_head_dims("pytorch", AttentionPass::kForward, false, 160, 2048); });
  EXPECT_NE(above.find("no curve for kernel 'pytorch' forward mask 'none' head dim 160"), std::string::npos) << above;
  const std::string below = refusal_of(
      [&] { r.flops_per_s_between_head_dims("pytorch", AttentionPass::kBackward, false, 32, 2048); });
  EXPECT_NE(below.find("head dim 32"), std::string::npos) << below;
  EXPECT_NE(refusal_of([&] { r.flops_per_s("pytorch", AttentionPass::kForward, false, 96, 2048); }).find("head dim 96"),
            std::string::npos);
}

// The reader refuses a bad curve: a mask it does not know, sequence lengths out of order, a repeated curve.
TEST(AttentionRates, ReaderRefusesBadCurves) {
  using nlohmann::json;
  const json good = {{"kernel", "cudnn"}, {"pass", "forward"}, {"mask", "causal"}, {"head_dim", 128},
                     {"tflops_by_seq", {{512, 300}, {1024, 400}}}};
  EXPECT_EQ(attention_rates_from_json(json::array({good}), "t").curves().size(), 1u);
  json bad_mask = good;
  bad_mask["mask"] = "sliding";
  EXPECT_NE(refusal_of([&] { attention_rates_from_json(json::array({bad_mask}), "t"); }).find("'mask' must be"),
            std::string::npos);
  json unordered = good;
  unordered["tflops_by_seq"] = {{1024, 300}, {512, 400}};
  EXPECT_NE(refusal_of([&] { attention_rates_from_json(json::array({unordered}), "t"); }).find("must increase"),
            std::string::npos);
  EXPECT_NE(refusal_of([&] { attention_rates_from_json(json::array({good, good}), "t"); }).find("repeats entry 0"),
            std::string::npos);
  json bad_pass = good;
  bad_pass["pass"] = "both";
  EXPECT_NE(refusal_of([&] { attention_rates_from_json(json::array({bad_pass}), "t"); }).find("'pass' must be"),
            std::string::npos);
}

// block_work tags the attention products with their pass and shape; with a kernel named, the forward products are
// priced at the kernel's forward rate and the backward's at its backward rate (not the attention_efficiency cap); an
// f32 run is refused; without a kernel the cap prices both passes as before.
TEST(AttentionRates, NamedKernelPricesEachPassAtItsOwnRate) {
  HardwareProfile p = h100();
  GptConfig c;  // Megatron-Core's 7.1B layer: d 4096, 32 heads of 128, T 4096, tp 2
  c.vocab_size = 1024;
  c.d_model = 4096;
  c.n_layers = 1;
  c.n_heads = 32;
  c.seq_len = 4096;
  const ModelSpec spec = make_gpt_spec(c);
  const BlockWork w = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, 2, 1);
  int forward = 0, backward = 0;
  for (const Gemm& g : w.forward.gemms) {
    if (!g.fused_attention) continue;
    ++forward;
    EXPECT_EQ(g.attention_pass, AttentionPass::kForward);
    EXPECT_EQ(g.attention_seq, 4096);
    EXPECT_EQ(g.attention_head_dim, 128);
    EXPECT_TRUE(g.attention_causal);
  }
  double backward_flops = 0;
  for (const Gemm& g : w.input_grad.gemms) {
    if (!g.fused_attention) continue;
    ++backward;
    backward_flops += g.flops();
    EXPECT_EQ(g.attention_pass, AttentionPass::kBackward);
  }
  ASSERT_EQ(forward, 2);
  ASSERT_EQ(backward, 5);
  PassWork bwd;
  for (const Gemm& g : w.input_grad.gemms) {
    if (g.fused_attention) bwd.gemms.push_back(g);
  }
  // Without a kernel: each product at min(the size curve, attention_efficiency), forward and backward alike.
  double expected_capped = 0;
  for (const Gemm& g : bwd.gemms) {
    expected_capped += g.flops() / (p.peak_flops_bf16 * std::min(p.gemm_efficiency_at(g.flops()), p.attention_efficiency));
  }
  const double capped = p.gemm_pass_seconds(bwd, true);
  EXPECT_NEAR(capped, expected_capped, 1e-9 * capped);
  p.attention_kernel = "cudnn";
  const double cudnn = p.gemm_pass_seconds(bwd, true);
  EXPECT_NEAR(cudnn, backward_flops / 499e12, 1e-9 * cudnn);  // compute-bound at these shapes
  for (const Gemm& g : w.forward.gemms) {
    if (g.fused_attention) {
      EXPECT_NEAR(p.gemm_efficiency_of(g, true), 518.0 / 989.0, 1e-12);
    }
  }
  for (const Gemm& g : w.forward.gemms) {
    if (!g.fused_attention) {
      EXPECT_DOUBLE_EQ(p.gemm_efficiency_of(g, true), p.gemm_efficiency_at(g.flops(), true));  // the curve: no kernel of its own
    }
  }
  const std::string f32 = refusal_of([&] { p.gemm_pass_seconds(bwd, false); });
  EXPECT_NE(f32.find("bf16 benchmarks"), std::string::npos) << f32;
  p.attention_kernel = "triton";  // forward only
  const std::string triton = refusal_of([&] { p.gemm_pass_seconds(bwd, true); });
  EXPECT_NE(triton.find("no curve for kernel 'triton' backward"), std::string::npos) << triton;
}

}  // namespace
}  // namespace cleave::partition::attention_rates_test
