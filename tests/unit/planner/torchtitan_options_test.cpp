// The run options that price torchtitan's published runs. Per-op selective recomputation (`cleave simulate
// --selective-recompute torchtitan_op`,
// partition::selective_op_rerun, SearchOptions::selective_recompute): on a small llama block the rerun is, by hand,
// the 2nd, 4th and 6th projection GEMMs (wk, wo, w3 = up) at their own shapes, the block's elementwise bytes less the
// attention core's and 8 launches; over a whole plan the recompute term is those GEMMs' seconds per layer and
// micro-batch, the elementwise and launch terms move by the rerun's bytes and launches less the attention core's,
// and the forward, input-gradient and weight-gradient terms do not move.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/block_work.hpp"
#include "partition/hardware_profile.hpp"

namespace cleave::planner::torchtitan_options_test {
namespace {

namespace fs = std::filesystem;
using partition::Gemm;
using partition::PassWork;

// Llama: d 16, 2 heads of 8 (1 kv head: k and v 8 wide), SwiGLU 32, T 8, 2 layers.
constexpr const char* kConfig = R"({"model": {"type": "llama", "vocab_size": 64, "d_model": 16, "n_layers": 2,
    "n_heads": 2, "n_kv_heads": 1, "ffn_hidden_size": 32, "seq_len": 8}, "batch": {"global_batch_size": 2,
    "micro_batch_size": 1}, "train": {"recompute": "selective"}, "device": {"precision": "bf16"},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

run_plan::Plan small_plan() {
  config::RunConfig c = config::parse_config(kConfig, "<string>", {});
  c.resolve(1);
  return run_plan::make_plan(c, 1, 0);
}

const partition::BlockSpec& first_layer(const run_plan::Plan& plan) {
  for (const auto& block : plan.spec.blocks) {
    if (block.kind == partition::BlockKind::kLlamaBlock) return block;
  }
  ADD_FAILURE() << "no llama block in the plan";
  return plan.spec.blocks.front();
}

TEST(SelectiveOp, RerunsEverySecondProjectionAndTheElementwiseOpsNotTheAttention) {
  const run_plan::Plan plan = small_plan();
  const PassWork r = partition::selective_op_rerun(first_layer(plan), DType::kBF16, 1, 1);
  // Forward GEMMs in launch order: q [8x16x16], k [8x8x16], v, o [8x16x16], gate [8x32x16], up, down; saved q v gate
  // down, rerun k, o, up (torchtitan's wk, wo, w3). As {m = rows, n = out, k = in}.
  ASSERT_EQ(r.gemms.size(), 3u);
  EXPECT_EQ(r.gemms[0].m, 8);
  EXPECT_EQ(r.gemms[0].n, 8);
  EXPECT_EQ(r.gemms[0].k, 16);
  EXPECT_EQ(r.gemms[1].n, 16);
  EXPECT_EQ(r.gemms[1].k, 16);
  EXPECT_EQ(r.gemms[2].n, 32);
  EXPECT_EQ(r.gemms[2].k, 16);
  for (const Gemm& g : r.gemms) EXPECT_FALSE(g.fused_attention);
  // Elementwise bytes (b = 2): RMSNorm 2·128·2 = 512, rope (8·32 read + 8·32 written)·2 = 1024, the add fused into
  // the second norm 4·128·2 = 1024, SwiGLU 3·8·32·2 = 1536, the residual add 3·128·2 = 768: 4864; no attention.
  EXPECT_DOUBLE_EQ(r.stream_bytes, 4864.0);
  // Launches: norm, k, rope, o, add+norm, up, SwiGLU, residual.
  EXPECT_DOUBLE_EQ(r.kernels, 8.0);
  // Outside the transformer layers (embedding, final norm, head) nothing is rerun.
  for (const auto& block : plan.spec.blocks) {
    if (block.kind == partition::BlockKind::kLlamaBlock) continue;
    const PassWork none = partition::selective_op_rerun(block, DType::kBF16, 1, 1);
    EXPECT_TRUE(none.gemms.empty() && none.stream_bytes == 0 && none.kernels == 0) << block.name;
  }
  EXPECT_EQ(partition::selective_recompute_from("torchtitan_op"), partition::SelectiveRecompute::kTorchtitanOp);
  EXPECT_FALSE(partition::selective_recompute_from("op").has_value());
}

TEST(SelectiveOp, PricesTheRerunGemmsAtTheirShapesInTheRecomputeTerm) {
  const fs::path dir = fs::temp_directory_path() / ("cleave_torchtitan_options_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "llama.json").string();
  std::ofstream(path) << kConfig;
  const partition::HardwareProfile a100 =
      partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  PlanChoice choice;
  choice.global_batch = 2;
  choice.recompute = partition::Recompute::kSelective;
  SearchOptions engine{1, 0}, titan{1, 0};
  titan.selective_recompute = partition::SelectiveRecompute::kTorchtitanOp;
  const PlanEstimate a = estimate_plan(path, {}, choice, a100, engine);
  const PlanEstimate e = estimate_plan(path, {}, choice, a100, titan);
  ASSERT_TRUE(a.valid && e.valid) << a.reason << e.reason;
  const run_plan::Plan plan = small_plan();
  const partition::BlockSpec& layer = first_layer(plan);
  const PassWork r = partition::selective_op_rerun(layer, DType::kBF16, 1, 1);
  // The attention core the engine's selective reruns: its launch and its [T, dh] streams (2 heads x 8 x (8·2 + 4)).
  const double core_bytes = 2.0 * 8 * (8 * 2 + 4), core_kernels = 1;
  const double runs = 2.0 * 2.0;  // 2 layers x 2 micro-batches
  double gemm_s = 0;
  for (const Gemm& g : r.gemms) gemm_s += a100.gemm_seconds(g, true);
  ASSERT_GT(gemm_s, 0.0);
  EXPECT_NEAR(e.breakdown[StepTerm::kRecompute], runs * gemm_s, 1e-12);
  EXPECT_NEAR(e.breakdown[StepTerm::kElementwise] - a.breakdown[StepTerm::kElementwise],
              runs * (r.stream_bytes - core_bytes) / a100.memory_bandwidth_Bps, 1e-12);
  EXPECT_NEAR(e.breakdown[StepTerm::kKernelLaunch] - a.breakdown[StepTerm::kKernelLaunch],
              runs * (r.kernels - core_kernels) * a100.kernel_launch_s, 1e-12);
  for (const StepTerm t : {StepTerm::kForward, StepTerm::kInputGrad, StepTerm::kWeightGrad}) {
    EXPECT_NEAR(e.breakdown[t], a.breakdown[t], 1e-12);
  }
  fs::remove_all(dir);
}

// PyTorch's eager RMSNorm (`simulate --norm torch_unfused`, RunKernels::torch_rmsnorm), by hand on the same llama
// (n = T·D = 128 elements of 2 bytes per norm): beyond the fused norm, per norm F n(2b + 28) = 4096 bytes over 7 more
// kernels, I n(b + 60) = 7936 over 9, W 2nb = 512 over 1; a llama block has two norms, the final norm one; full
// recomputation reruns the block's F part; other blocks launch nothing more.
TEST(TorchRmsNorm, AddsTheUnfusedOpsBytesAndKernelsPerNorm) {
  const run_plan::Plan plan = small_plan();
  partition::RunKernels run;
  run.torch_rmsnorm = true;
  ASSERT_TRUE(run.any());
  int final_norms = 0;
  for (const auto& block : plan.spec.blocks) {
    const partition::BlockWork w = partition::run_kernels_work(block, DType::kBF16, run, partition::Recompute::kNone, 1, 1);
    if (block.kind == partition::BlockKind::kLlamaBlock) {
      EXPECT_DOUBLE_EQ(w.forward.stream_bytes, 2 * 4096.0);
      EXPECT_DOUBLE_EQ(w.forward.kernels, 14.0);
      EXPECT_DOUBLE_EQ(w.input_grad.stream_bytes, 2 * 7936.0);
      EXPECT_DOUBLE_EQ(w.input_grad.kernels, 18.0);
      EXPECT_DOUBLE_EQ(w.weight_grad.stream_bytes, 2 * 512.0);
      EXPECT_DOUBLE_EQ(w.weight_grad.kernels, 2.0);
      const partition::BlockWork full =
          partition::run_kernels_work(block, DType::kBF16, run, partition::Recompute::kFull, 1, 1);
      EXPECT_DOUBLE_EQ(full.input_grad.stream_bytes, 2 * (7936.0 + 4096.0));
      EXPECT_DOUBLE_EQ(full.input_grad.kernels, 18.0 + 14.0);
    } else if (block.kind == partition::BlockKind::kRmsNorm) {
      ++final_norms;
      EXPECT_DOUBLE_EQ(w.forward.stream_bytes, 4096.0);
      EXPECT_DOUBLE_EQ(w.forward.kernels, 7.0);
      EXPECT_DOUBLE_EQ(w.input_grad.stream_bytes, 7936.0);
      EXPECT_DOUBLE_EQ(w.weight_grad.stream_bytes, 512.0);
    } else {
      EXPECT_EQ(w.forward.stream_bytes + w.input_grad.stream_bytes + w.weight_grad.stream_bytes, 0.0) << block.name;
    }
  }
  EXPECT_EQ(final_norms, 1);
}

}  // namespace
}  // namespace cleave::planner::torchtitan_options_test
