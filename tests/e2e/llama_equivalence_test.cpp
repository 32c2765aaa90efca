// model.type llama under every layout (run under mpiexec, np 2 and 4): tensor, pipeline (1F1B, a zero-bubble
// split backward, ZB-V with a tied table), data parallel with ZeRO-1, recomputation (selective, full) and bf16
// mixed precision each give the per-step losses and final parameters of ONE rank from the same seed (the
// reference runs inside rank 0 on a communicator of its own); and every rank's whole memory peak stays near the
// memory plan. The model is small and grouped-query (4 query heads over 2 key/value heads, hd 8).
//
// Tolerances are the GPT tests' (tests/e2e/pipeline_equivalence_test.cpp, mixed_precision_test.cpp, with the
// reasons there): untied pipeline splits in deterministic mode bit-identical; sums that associate differently
// (a tied table split over ranks, data parallel, ZeRO-1) within kRounding; tensor parallel (partial GEMM sums
// added by the all-reduce) within kTensorParallel; bf16 tensor parallel kBf16TensorParallel of each tensor's
// scale. Recomputation reruns the same kernels on the same inputs, so it changes nothing in any layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/train/rank_setup.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/layout_compare.hpp"
#include "support/layout_overrides.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::llama_equivalence_test {
namespace {

std::vector<LayoutCase> layouts_for(int world) {
  const std::string tied = "model.tie_embeddings=true", bf16 = "device.precision=bf16", qk_norm = "model.qk_norm=true";
  const Bound exact = Bound::bit_exact(), rounding = Bound::relative(kRounding);
  const Bound tensor_parallel = Bound::relative(kTensorParallel);
  if (world == 2) {
    return {{"tp2", {tp(2)}, tensor_parallel},
            {"tp2_tied_selective", {tp(2), tied, "train.recompute=selective"}, tensor_parallel},
            {"pp2_1f1b", {pp(2)}, exact},
            {"pp2_zb_h1_full_recompute", {pp(2), schedule("zb_h1"), "train.recompute=full"}, exact},
            {"pp2_zb_v_tied", {pp(2), schedule("zb_v"), tied}, rounding},
            {"dp2_zero1", {"batch.micro_batch_size=2", "optimizer.zero_stage=1"}, rounding},
            {"dp2_zero3", {"batch.micro_batch_size=2", "optimizer.zero_stage=3"}, rounding},
            {"bf16_pp2_zb_h1", {pp(2), schedule("zb_h1"), bf16}, exact},
            {"bf16_tp2", {tp(2), bf16}, Bound::scaled(kBf16TensorParallel, kBf16TensorParallelLoss)},
            // Qwen3's per-head q/k norms: their scale's gradient is a partial sum over the heads' tp ranks.
            {"tp2_qk_norm", {tp(2), qk_norm}, tensor_parallel},
            {"tp2_sp_qk_norm_selective", {tp(2), qk_norm, "parallel.sequence_parallel=true", "train.recompute=selective"},
             tensor_parallel},
            {"pp2_zb_h1_qk_norm", {pp(2), schedule("zb_h1"), qk_norm}, exact}};
  }
  if (world == 4) {
    return {{"tp2_pp2_1f1b", {tp(2), pp(2)}, tensor_parallel},
            {"tp2_pp2_zb_v_tied_selective", {tp(2), pp(2), schedule("zb_v"), tied, "train.recompute=selective"},
             tensor_parallel},
            {"dp2_pp2_zero1_full_recompute",
             {pp(2), "batch.micro_batch_size=1", "optimizer.zero_stage=1", "train.recompute=full"}, rounding},
            {"dp2_pp2_zero3_zb_h1", {pp(2), schedule("zb_h1"), "batch.micro_batch_size=1", "optimizer.zero_stage=3"},
             rounding},
            {"tp2_dp2_qk_norm_zero1", {tp(2), qk_norm, "batch.micro_batch_size=2", "optimizer.zero_stage=1"},
             tensor_parallel}};
  }
  return {};
}

TEST(LlamaEquivalence, EveryLayoutMatchesOneRank) {
  auto world = make_world(/*deterministic=*/true);
  const auto layouts = layouts_for(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no layouts for world size " << world->size();
  const auto plain_reference = [](config::RunConfig& one) { one.train.recompute = partition::Recompute::kNone; };
  const auto check = [](const LayoutCase& layout, const LayoutRuns& runs) {
    expect_reference_trained(layout, runs);
    ASSERT_EQ(runs.parallel.params.count("blocks.0.attn.k.weight"), 1u);
    EXPECT_EQ(runs.parallel.params.at("blocks.0.attn.k.weight").size(), 16u * 32u);  // 2 kv heads x hd 8, d 32
  };
  expect_every_layout_matches_one_rank(*world, layouts, tiny_llama, "llama", 30, plain_reference, check);
}

// Every rank's whole memory peak near the memory plan for a llama pipeline (as the GPT test in
// pipeline_equivalence_test.cpp), fp32 and bf16: within 5%, or a few boundary tensors [T, D] for tiny stages.
// The plan is given this process's CPU kernels (train::cpu_kernels_of, as the trainer's own plan), so bf16 holds on
// either kind of CPU: device.blas auto widens the GEMMs' bf16 operands, or (bf16 instructions) runs oneDNN's bf16
// kernels, which widen nothing; openblas always widens.
TEST(LlamaMemory, MeasuredPeakIsNearThePlan) {
  auto world = make_world();
  const int p = world->size();
  for (const char* schedule : {"1f1b", "zb_h1", "zb_h1 bf16", "zb_h1 bf16 openblas"}) {
    SCOPED_TRACE(schedule);
    const bool bf16 = std::string(schedule).find("bf16") != std::string::npos;
    const bool openblas = std::string(schedule).ends_with("openblas");
    auto config = config::parse_config(R"({
      "model": {"type": "llama", "vocab_size": 64, "d_model": 64, "n_layers": 6, "n_heads": 4, "n_kv_heads": 2,
                "seq_len": 32},
      "batch": {"micro_batch_size": 1, "global_batch_size": 16},
      "train": {"steps": 2, "eval_batches": 0},
      "data": {"type": "synthetic"}
    })", "memory", {"parallel.pipeline_model_parallel_size=" + std::to_string(p),
                    std::string("parallel.schedule=") + std::string(schedule).substr(0, std::string(schedule).find(' ')),
                    std::string("device.precision=") + (bf16 ? "bf16" : "fp32"),
                    std::string("device.blas=") + (openblas ? "openblas" : "auto")});
    train::Trainer trainer(config, *world);
    trainer.step(0);
    trainer.reset_peak_memory();
    trainer.step(1);
    const std::int64_t measured = trainer.memory_stats().peak_total;
    const run_plan::MemoryPlan plan =
        run_plan::estimate_rank_memory(trainer.plan(), trainer.config(), world->rank(), train::cpu_kernels_of(config));
    std::printf("[ memory ] llama %s rank %d: planned %lld B, measured %lld B\n", schedule, world->rank(),
                static_cast<long long>(plan.total()), static_cast<long long>(measured));
    EXPECT_NEAR(static_cast<double>(plan.total()), static_cast<double>(measured),
                std::max(0.05 * static_cast<double>(measured), (2.0 + p) * 32 * 64 * 4))
        << "rank " << world->rank();
  }
}

}  // namespace
}  // namespace cleave::testing::llama_equivalence_test
