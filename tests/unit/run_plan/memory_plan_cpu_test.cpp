// The memory plan's CPU workspace reads the run's resolved CPU kernels (run_plan::CpuKernels: the GEMM choice for
// bf16 operands and the threads), passed in, so these checks hold on any machine: both GEMM choices are given by
// hand. On the widened path a bf16 GEMM's operands are widened into f32 workspace; on oneDNN's bf16 kernels nothing
// is, and the workspace is the largest block output or the attention kernel's per-thread scratch, whose formula is
// kept equal to the kernel's own (kernels/cpu/flash_attention.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/run_plan/workspace_memory.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/moe.hpp"
#include "partition/model_spec.hpp"

namespace cleave::run_plan::memory_plan_cpu_test {
namespace {

config::RunConfig one_rank(const std::string& precision, std::int64_t micro) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 32},
    "batch": {"global_batch_size": 8},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})",
                                             "<string>", {"device.precision=" + precision,
                                                          "batch.micro_batch_size=" + std::to_string(micro)});
  c.resolve(1);
  return c;
}

std::int64_t workspace(const config::RunConfig& c, const CpuKernels& cpu) {
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0, cpu);
  return estimate_rank_memory(plan, c, 0, cpu).bytes[static_cast<std::size_t>(MemoryCategory::kWorkspace)];
}

CpuKernels kernels(bool bf16_kernels, int threads) {
  CpuKernels cpu;
  cpu.bf16_gemm = {ops::CpuBlas::kOneDnn, bf16_kernels};
  cpu.threads = threads;
  return cpu;
}

TEST(MemoryPlanCpu, Bf16WorkspaceFollowsTheResolvedGemmChoice) {
  for (std::int64_t micro : {1, 4}) {
    SCOPED_TRACE(micro);
    const config::RunConfig bf16 = one_rank("bf16", micro);
    const Plan plan = make_plan(bf16, 8 / static_cast<int>(micro), 0);
    // On bf16 kernels, without the attention scratch (threads 0): the largest block output of a micro-batch (f32
    // costs, as the plan's transient output or gradient), by hand.
    std::int64_t largest = 0;
    for (const auto& cost : partition::model_costs(plan.spec, DType::kF32)) largest = std::max(largest, cost.output_bytes);
    EXPECT_EQ(workspace(bf16, kernels(true, 0)), largest * micro);
    // Widened: the widest GEMM's operands in f32 dominate that (the MLP's fc1: x [T, D], W [D, F], y [T, F]).
    const std::int64_t t = 32, d = 64, f = 4 * d;
    EXPECT_EQ(workspace(bf16, kernels(false, 0)), 4 * (micro * t * d + d * f + micro * t * f));
    // The default without the machine's facts is the widened path.
    EXPECT_EQ(estimate_rank_memory(plan, bf16, 0).bytes[static_cast<std::size_t>(MemoryCategory::kWorkspace)],
              workspace(bf16, kernels(false, 0)));
    // With the run's threads (the trainer's plan): the attention kernel's scratch (bf16 blocks: the backward's f32 dQ
    // too), no block output stand-in (the lm head's logits are no scratch), plus the executor's loss scale and the
    // step's losses (one f32 each per micro-batch: 8 / micro of them).
    const std::int64_t scratch = cpu_attention_scratch_bytes(plan.spec.blocks[1], 2, /*bf16=*/true);
    EXPECT_GT(scratch, 0);
    EXPECT_EQ(workspace(bf16, kernels(true, 2)), scratch + 4 + 4 * (8 / micro));
    // fp32 runs widen nothing: the GEMM choice for bf16 operands changes nothing.
    const config::RunConfig fp32 = one_rank("fp32", micro);
    EXPECT_EQ(workspace(fp32, kernels(true, 2)), workspace(fp32, kernels(false, 2)));
  }
}

TEST(MemoryPlanCpu, AttentionScratchIsTheKernels) {
  for (std::int64_t t : {1, 17, 64, 130, 300}) {
    for (const auto& [heads, kv_heads, d] : std::vector<std::array<std::int64_t, 3>>{{4, 4, 64}, {6, 2, 36}, {8, 1, 512}}) {
      partition::BlockSpec block;
      block.kind = partition::BlockKind::kTransformerBlock;
      block.seq_len = t;
      block.in_features = d;
      block.n_heads = heads;
      block.n_kv_heads = kv_heads;
      kernels::cpu::FlashAttentionShape shape;
      shape.batch = 2;
      shape.q_len = shape.kv_len = t;
      shape.q_heads = heads;
      shape.kv_heads = kv_heads;
      shape.head_dim = d / heads;
      for (int threads : {1, 3}) {
        for (bool bf16 : {false, true}) {
          const std::string at = "T " + std::to_string(t) + " heads " + std::to_string(heads) + "/" +
                                 std::to_string(kv_heads) + " d " + std::to_string(d) + " threads " +
                                 std::to_string(threads) + (bf16 ? " bf16" : " f32");
          const std::int64_t planned = cpu_attention_scratch_bytes(block, threads, bf16);
          const auto kernel =
              static_cast<std::int64_t>(4 * kernels::cpu::flash_attention_workspace_floats(shape, threads, bf16));
          const auto per_thread =
              static_cast<std::int64_t>(4 * kernels::cpu::flash_attention_workspace_floats(shape, 1, bf16));
          // From T 257 at several threads the backward may run a task per query chunk (2 chunks at T 300) with
          // partial dK / dV sums, [2, T, hd] each, for up to 2 x threads - 1 groups: the plan, without the batch,
          // counts that bound.
          const std::int64_t chunk_bound = threads > 1 && t > 256 ? 4 * (2 * threads - 1) * 2 * 2 * t * (d / heads) : 0;
          EXPECT_EQ(planned, threads * per_thread + chunk_bound) << at;
          EXPECT_GE(planned, kernel) << at;
        }
      }
    }
  }
  // Longer sequences (4 query chunks), 1 to 8 groups on 2 threads: at least the kernel's workspace at every batch, and
  // no more above it than the partial sums' bound.
  for (std::int64_t t : {512, 1000}) {
    for (std::int64_t batch : {1, 2, 3, 7, 8}) {
      partition::BlockSpec block;
      block.kind = partition::BlockKind::kTransformerBlock;
      block.seq_len = t;
      block.in_features = 64;
      block.n_heads = 4;
      block.n_kv_heads = 1;
      kernels::cpu::FlashAttentionShape shape;
      shape.batch = batch;
      shape.q_len = shape.kv_len = t;
      shape.q_heads = 4;
      shape.kv_heads = 1;
      shape.head_dim = 16;
      const auto kernel = static_cast<std::int64_t>(4 * kernels::cpu::flash_attention_workspace_floats(shape, 2, true));
      const std::int64_t planned = cpu_attention_scratch_bytes(block, 2, true);
      EXPECT_GE(planned, kernel) << "T " << t << " batch " << batch;
      EXPECT_LE(planned, kernel + 4 * 3 * 4 * 2 * t * 16) << "T " << t << " batch " << batch;
      // Given the groups of the call (batch x kv heads), the kernel's own workspace, at 1, 2 and 3 threads and either
      // precision (before, the bound: 12 MiB over at T 8,192, 4 groups on 2 threads, which take no partial sums).
      for (int threads : {1, 2, 3}) {
        for (bool bf16 : {false, true}) {
          EXPECT_EQ(cpu_attention_scratch_bytes(block, threads, bf16, batch * shape.kv_heads),
                    static_cast<std::int64_t>(4 * kernels::cpu::flash_attention_workspace_floats(shape, threads, bf16)))
              << "T " << t << " batch " << batch << " threads " << threads << (bf16 ? " bf16" : " f32");
        }
      }
    }
  }
  partition::BlockSpec mlp;  // no attention
  mlp.kind = partition::BlockKind::kLinear;
  EXPECT_EQ(cpu_attention_scratch_bytes(mlp, 4, true), 0);
}

// The widened path holds one GEMM's three operands in f32. A mixture's expert GEMMs are listed at an expert's mean
// rows (micro · T · k / E), but routing may send every token of the micro-batch to one expert, and the engine widens
// one expert's GEMM at a time: the bound takes each expert GEMM at every token (its weight-gradient product too,
// where the tokens are the reduction), so it covers the forced one_expert routing.
TEST(MemoryPlanCpu, WideningCoversAnExpertThatReceivesEveryToken) {
  partition::MoeConfig c;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden_size = 256;  // wider than the attention projections, so the experts set the bound
  c.seq_len = 16;
  c.n_experts = 8;
  c.top_k = 2;
  const partition::ModelSpec spec = partition::make_moe_spec(c);
  const auto block =
      std::find_if(spec.blocks.begin(), spec.blocks.end(), [](const auto& b) { return b.n_experts > 0; });
  ASSERT_NE(block, spec.blocks.end());
  for (const std::int64_t micro : {1, 4}) {
    for (const int tp : {1, 2}) {
      const double tokens = static_cast<double>(micro * c.seq_len), d = 32, f = 256.0 / tp;
      const double one_expert = (tokens * d + d * f + tokens * f) * 4;  // x, W, h of gate/up at every token, f32
      EXPECT_GE(static_cast<double>(cpu_bf16_widening_bytes(*block, partition::BlockCost{}, partition::Recompute::kNone,
                                                            tp, micro)),
                one_expert)
          << "micro-batch " << micro << ", tp " << tp;
    }
  }
}

}  // namespace
}  // namespace cleave::run_plan::memory_plan_cpu_test
