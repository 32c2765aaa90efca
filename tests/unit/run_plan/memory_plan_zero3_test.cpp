// The memory plan under ZeRO-3 (optimizer.zero_stage 3), by hand on a small GPT with awkward sizes (d 24,
// d_ff 96, T 10, vocab 51 or 641, dp 3) so that every padding of a unit matters: each tensor's gradient from a
// 64-byte boundary (16 f32 elements: a norm's 24 take 32, the qkv bias's 72 take 80, the 51 x 24 table 1232), the
// unit to 16 elements, then to a multiple of dp. Each rank keeps 1/dp of every unit (f32
// master, and a bf16 working shard in bf16 runs) plus two adjacent blocks' units in full in the compute dtype;
// gradients are the unit buckets in full plus, while they are reduced in ready order, the shard of the bucket
// completing less what the buckets before it freed by trading their buffers for shards (largest for the first
// bucket, or for a block's right after a small final norm's); optimizer state is ÷ dp;
// nothing is held between steps. The expected numbers are written out from the formulas, not from the code.
// Over a cap, the message estimates each higher ZeRO stage and says which fits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/param_counts.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/family.hpp"
#include "partition/param_tensors.hpp"

namespace cleave::run_plan::memory_plan_zero3_test {
namespace {

constexpr std::int64_t kD = 24, kFf = 96, kT = 10, kDp = 3;
constexpr std::int64_t kBlock = 4 * kD * kD + 2 * kD * kFf + 9 * kD + kFf;  // 7224 parameters
constexpr std::int64_t kFinalNorm = 2 * kD;                                 // 48

constexpr std::int64_t r16(std::int64_t n) { return (n + 15) / 16 * 16; }
// Tensors as their bucket lays them out: each from a 16-element boundary.
constexpr std::int64_t aligned(std::initializer_list<std::int64_t> tensors) {
  std::int64_t sum = 0;
  for (const std::int64_t n : tensors) sum += r16(n);
  return sum;
}
// A unit: its tensors aligned, then a multiple of dp.
constexpr std::int64_t unit(std::int64_t aligned_elements) { return (r16(aligned_elements) + kDp - 1) / kDp * kDp; }
constexpr std::int64_t unit(std::initializer_list<std::int64_t> tensors) { return unit(aligned(tensors)); }
// A gpt block's tensors (ln1, qkv, proj, ln2, fc, proj; each weight then bias) and the final norm's: 7280 and 64.
constexpr std::int64_t kBlockAligned =
    aligned({kD, kD, 3 * kD * kD, 3 * kD, kD * kD, kD, kD, kD, kD * kFf, kFf, kFf * kD, kD});
constexpr std::int64_t kNormAligned = aligned({kD, kD});

// optimizer.zero_reduce per_step unless `overrides` sets it (the per-micro-batch form has its own tests below).
config::RunConfig zero3(std::int64_t vocab, bool tied, int pp, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), "optimizer.zero_reduce=per_step");
  overrides.push_back("parallel.pipeline_model_parallel_size=" + std::to_string(pp));
  config::RunConfig c = config::parse_config(
      R"({"model": {"type": "gpt", "vocab_size": )" + std::to_string(vocab) + R"(, "d_model": 24, "n_layers": 4,
          "n_heads": 4, "seq_len": 10, "tie_embeddings": )" + (tied ? "true" : "false") + R"(},
        "batch": {"global_batch_size": 6, "micro_batch_size": 1},
        "parallel": {"data_parallel_size": 3}, "optimizer": {"type": "adamw", "zero_stage": 3},
        "data": {"type": "synthetic"}})",
      "<string>", overrides);
  c.resolve(3 * pp * c.parallel.tensor_model_parallel_size);
  return c;
}

MemoryPlan estimate(const config::RunConfig& c, int pp_rank) {
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), pp_rank);
  return estimate_rank_memory(plan, c, pp_rank);
}

std::int64_t at(const MemoryPlan& m, MemoryCategory c) { return m.bytes[static_cast<std::size_t>(c)]; }

TEST(MemoryPlanZeroThree, ShardsPlusTwoAdjacentUnitsAndGradientsInUnitBuckets) {
  // Untied, one stage: units embedding (51·24 tokens + 10·24 positions = 1464), 4 blocks (7224), final norm
  // (48), head (1224); the loss has none.
  const std::int64_t embedding = unit({51 * kD, kT * kD}), block = unit(kBlockAligned), norm = unit(kNormAligned),
                     head = unit({51 * kD});
  ASSERT_EQ(embedding, 1473);  // 1224 -> 1232, + 240, -> 1473
  ASSERT_EQ(block, 7281);      // 7224 -> 7280 (six tensors of 24 and the qkv bias's 72 aligned) -> 7281
  ASSERT_EQ(norm, 66);         // 2 x 24 -> 2 x 32 -> 66
  const std::int64_t units = embedding + 4 * block + norm + head;
  const std::int64_t gathered = 2 * block;  // two adjacent blocks: the largest pair
  for (const bool bf16 : {false, true}) {
    const config::RunConfig c = zero3(51, false, 1, {bf16 ? "device.precision=bf16" : "device.precision=fp32"});
    const MemoryPlan m = estimate(c, 0);
    // f32 master shards (+ bf16 working shards), the gathered pair in the compute dtype.
    EXPECT_EQ(at(m, MemoryCategory::kParameters), units / kDp * (bf16 ? 6 : 4) + gathered * (bf16 ? 2 : 4))
        << (bf16 ? "bf16" : "fp32");
    // f32 gradients in full, plus the largest excess while they are reduced: the head's shard first (411), then
    // the final norm's (22, after the head's trade freed 822), then block 3's (2427, after 822 + 44 were freed).
    const std::int64_t excess = std::max(head / kDp, block / kDp - (head - head / kDp) - (norm - norm / kDp));
    ASSERT_EQ(excess, 2427 - 822 - 44);
    EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * units + 4 * excess);
    EXPECT_EQ(m.gradients_between_steps, 0);
    EXPECT_EQ(at(m, MemoryCategory::kOptimizerState), 2 * 4 * units / kDp);  // AdamW's two moments, ÷ dp
    EXPECT_EQ(at(m, MemoryCategory::kCommunication), 0);
  }
  // ZeRO-1 and 2 of the same run hold every parameter in flat buffers laid out like the per-step gradient buckets
  // (one bucket here: each tensor aligned, 31888, then a multiple of dp, 31890; unaligned they sum to 31632, what the
  // plan counted before); ZeRO-1 keeps those buckets between steps, ZeRO-2 no gradients.
  ASSERT_EQ(51 * kD + kT * kD + 4 * kBlock + kFinalNorm + 51 * kD, 31632);
  const std::int64_t params = unit(aligned({51 * kD, kT * kD}) + 4 * kBlockAligned + kNormAligned + aligned({51 * kD}));
  ASSERT_EQ(params, 31890);
  for (const int stage : {1, 2}) {
    config::RunConfig c = zero3(51, false, 1);
    c.optimizer.zero_stage = stage;
    const MemoryPlan m = estimate(c, 0);
    EXPECT_EQ(at(m, MemoryCategory::kParameters), 4 * params) << "zero " << stage;
    EXPECT_EQ(m.gradients_between_steps, stage == 1 ? 4 * params : 0) << "zero " << stage;
  }
}

// Buckets smaller than any tensor (parallel.dp_bucket_mb 1e-6): every tensor alone in its bucket, so ZeRO-1's flat
// values are Σ over the tensors of round_up(round_up(numel, 16), dp), the layout's per-bucket dp padding counted 53
// times (one bucket of them all takes 31890; unaligned 31632), and the optimizer's two moments their thirds.
TEST(MemoryPlanZeroThree, ZeroOneFlatValuesPadEachBucketToDp) {
  std::int64_t values = unit({51 * kD}) + unit({kT * kD}) + unit({kD}) + unit({kD}) + unit({51 * kD});
  for (int b = 0; b < 4; ++b) {
    for (const std::int64_t n : {kD, kD, 3 * kD * kD, 3 * kD, kD * kD, kD, kD, kD, kD * kFf, kFf, kFf * kD, kD}) {
      values += unit({n});
    }
  }
  ASSERT_EQ(values, 31920);  // a block 7287: its six tensors of 24 take 33, the qkv bias 81
  config::RunConfig c = zero3(51, false, 1, {"parallel.dp_bucket_mb=0.000001"});
  c.optimizer.zero_stage = 1;
  const MemoryPlan m = estimate(c, 0);
  EXPECT_EQ(at(m, MemoryCategory::kParameters), 4 * values);
  EXPECT_EQ(m.gradients_between_steps, 4 * values);
  EXPECT_EQ(at(m, MemoryCategory::kOptimizerState), 2 * 4 * values / kDp);
}

TEST(MemoryPlanZeroThree, DeterministicPartialSumsAndBf16Wire) {
  // 2 micro-batches per replica in deterministic mode: one partial sum of the full gradients (more than the
  // first unit's shard); a bf16 wire: a bf16 twin of every unit bucket.
  const std::int64_t units = unit({51 * kD, kT * kD}) + 4 * unit(kBlockAligned) + unit(kNormAligned) + unit({51 * kD});
  const MemoryPlan m = estimate(zero3(51, false, 1, {"train.deterministic=true", "parallel.grad_reduce_dtype=bf16"}), 0);
  EXPECT_EQ(at(m, MemoryCategory::kGradients), 2 * 4 * units);
  EXPECT_EQ(at(m, MemoryCategory::kCommunication), 2 * units);
}

TEST(MemoryPlanZeroThree, TiedTableSplitOverPipelineRanksIsAUnitOfItsOwn) {
  // Tied, pp2 with blocks [embedding, block 0, block 1] [block 2, block 3, final norm, head, loss]: each rank
  // keeps a copy of the 641 x 24 table as a unit of its own. Rank 0's largest pair is the embedding (positions
  // and table) with block 0; rank 1's is the final norm with the head, which reads the table (and holds
  // nothing else).
  const std::int64_t table = unit({641 * kD}), positions = unit({kT * kD}), block = unit(kBlockAligned),
                     norm = unit(kNormAligned);
  ASSERT_EQ(table, 15393);  // 15384 -> 15392 -> 15393
  ASSERT_GT(norm + table, 2 * block);
  const std::vector<std::string> manual = {"parallel.partition.method=manual", "parallel.partition.blocks_per_stage=[3,5]"};
  const config::RunConfig c = zero3(641, true, 2, manual);
  const MemoryPlan rank0 = estimate(c, 0), rank1 = estimate(c, 1);
  const std::int64_t units0 = table + positions + 2 * block, units1 = table + 2 * block + norm;
  EXPECT_EQ(at(rank0, MemoryCategory::kParameters), 4 * units0 / kDp + 4 * (positions + table + block));
  EXPECT_EQ(at(rank1, MemoryCategory::kParameters), 4 * units1 / kDp + 4 * (norm + table));
  // Reduced first: block 1's unit on rank 0; on rank 1 the final norm's, then block 3's (the split table's
  // bucket goes after every block's, once its two copies are summed).
  EXPECT_EQ(at(rank0, MemoryCategory::kGradients), 4 * units0 + 4 * block / kDp);
  EXPECT_EQ(at(rank1, MemoryCategory::kGradients), 4 * units1 + 4 * (block / kDp - (norm - norm / kDp)));
  EXPECT_EQ(at(rank1, MemoryCategory::kOptimizerState), 8 * units1 / kDp);
}

TEST(MemoryPlanZeroThree, TiedTableOnOneRankIsInTheEmbeddingsUnit) {
  // Tied, one stage: the table is counted once, in the embedding's unit; the head has no unit of its own.
  const std::int64_t embedding = unit({641 * kD, kT * kD}), block = unit(kBlockAligned);
  ASSERT_EQ(embedding, 15633);  // 15384 -> 15392, + 240, -> 15633
  const std::int64_t units = embedding + 4 * block + unit(kNormAligned);
  const MemoryPlan m = estimate(zero3(641, true, 1), 0);
  EXPECT_EQ(at(m, MemoryCategory::kParameters), 4 * units / kDp + 4 * (embedding + block));
  EXPECT_EQ(at(m, MemoryCategory::kOptimizerState), 8 * units / kDp);
  // The final norm's bucket is reduced first (the tied head's gradient lands in the embedding's unit), then
  // block 3's: its shard less what the norm's trade freed.
  const std::int64_t norm = unit(kNormAligned);
  EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * units + 4 * (block / kDp - (norm - norm / kDp)));
}

// optimizer.zero_reduce per_microbatch: the gradients are this rank's shards (Σ units ÷ dp, all allocated when
// the step begins) plus the most bucket buffers alive at once. Walking each micro-batch's backward, blocks last to
// first: a block's bucket is allocated before its W, launched after it, and stays (in flight) until the next
// launch completes it. So two adjacent blocks' buckets at once, or, with a tied table on one rank, the embedding's
// unit twice: the last micro-batch's in flight while the next one's head writes into a new one.
TEST(MemoryPlanZeroThree, PerMicrobatchHoldsShardsAndTwoBuckets) {
  const std::int64_t block = unit(kBlockAligned), norm = unit(kNormAligned);
  const std::string per_microbatch = "optimizer.zero_reduce=per_microbatch";
  {  // untied: head 1224, final norm, block 3 (alone with the norm in flight), block 2 with block 3 in flight, ...
    const std::int64_t units = unit({51 * kD, kT * kD}) + 4 * block + norm + unit({51 * kD});
    const MemoryPlan m = estimate(zero3(51, false, 1, {per_microbatch}), 0);
    EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * (units / kDp + 2 * block));
    EXPECT_EQ(m.gradients_between_steps, 0);
    EXPECT_EQ(at(m, MemoryCategory::kCommunication), 0);
    // Less than the per-step form's full unit buckets.
    EXPECT_LT(at(m, MemoryCategory::kGradients), at(estimate(zero3(51, false, 1), 0), MemoryCategory::kGradients));
  }
  {  // tied, one stage: the embedding's unit (with the table) is written from the head's W to the embedding's:
     // the last micro-batch's in flight, the next one's opened by the head, then the final norm's
    const std::int64_t embedding = unit({641 * kD, kT * kD});
    const std::int64_t units = embedding + 4 * block + norm;
    ASSERT_GT(2 * embedding + norm, embedding + 2 * block);
    const MemoryPlan m = estimate(zero3(641, true, 1, {per_microbatch}), 0);
    EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * (units / kDp + 2 * embedding + norm));
  }
  {  // a bf16 wire: the f32 buffer goes at launch (one bucket alive besides the one being filled's widened shard),
     // its bf16 copy is in flight (at most one bucket's: the largest)
    const std::int64_t units = unit({51 * kD, kT * kD}) + 4 * block + norm + unit({51 * kD});
    const MemoryPlan m = estimate(zero3(51, false, 1, {per_microbatch, "parallel.grad_reduce_dtype=bf16"}), 0);
    EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * (units / kDp + block + block / kDp));
    EXPECT_EQ(at(m, MemoryCategory::kCommunication), 2 * block);
  }
}

// ZeRO-2 per micro-batch: whole blocks of a stage packed into buckets of parallel.dp_bucket_mb (here 0.04 MiB =
// 10485 f32 elements: head, final norm and block 3 share one; blocks 2 and 1 one each; block 0 with the
// embedding), each parameter tensor from a 16-element boundary, a bucket padded to 16 and then a multiple of dp.
TEST(MemoryPlanZeroThree, ZeroTwoPerMicrobatchPacksWholeBlocks) {
  const std::int64_t first = unit(aligned({51 * kD}) + kNormAligned + kBlockAligned);  // head, norm, block 3
  const std::int64_t middle = unit(kBlockAligned);
  const std::int64_t last = unit(kBlockAligned + aligned({51 * kD, kT * kD}));           // block 0, embedding
  ASSERT_EQ(first, 8577);  // 1232 + 64 + 7280 = 8576 -> 8577
  ASSERT_EQ(last, 8754);   // 7280 + 1472 = 8752 -> 8754
  const MemoryPlan m = estimate(
      zero3(51, false, 1, {"optimizer.zero_stage=2", "optimizer.zero_reduce=per_microbatch", "parallel.dp_bucket_mb=0.04"}),
      0);
  // The most alive at once: the next micro-batch's first bucket opening while the last one is in flight.
  EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * ((first + 2 * middle + last) / kDp + last + first));
  // The flat f32 values are laid out like these buckets (31893 elements; one per-step bucket would take 31890), the
  // optimizer's two moments their shards.
  EXPECT_EQ(at(m, MemoryCategory::kParameters), 4 * (first + 2 * middle + last));
  EXPECT_EQ(at(m, MemoryCategory::kOptimizerState), 2 * 4 * (first + 2 * middle + last) / kDp);
}

// At tp 2 a unit or bucket holds one tp rank's parameters: the replicated ones whole (a block's two layer norms and
// its two row-parallel biases, 6·24 = 144; the final norm, 48; the positions, 10·24 = 240), the rest halved, the
// vocab-parallel table as ceil(51 / 2) = 26 rows. Units, each tensor from a 16-element boundary: embedding 26·24 + 240
// = 864, a block (7224 - 144) / 2 + 144 = 3684, its six tensors of 24 taking 32 and its qkv bias's 36 taking 48: 3744,
// final norm 48 -> 64 -> 66, head 26·24 = 624; 16530 in all (one sum per unit gave 16320: 3696 a block, 48 the norm;
// dividing everything by tp 15867). ZeRO-2 per micro-batch (0.04 MiB buckets): head, norm, blocks 3 and 2 (8176 ->
// 8178), then blocks 1, 0 and the embedding (8352), both alive when the next micro-batch's first opens while the last
// is in flight.
TEST(MemoryPlanZeroThree, TensorParallelUnitsKeepTheReplicatedParametersWhole) {
  const std::int64_t block_tp2 =
      aligned({kD, kD, 3 * kD / 2 * kD, 3 * kD / 2, kD * (kD / 2), kD,  // ln1, qkv, proj
               kD, kD, kFf / 2 * kD, kFf / 2, kD * (kFf / 2), kD});      // ln2, fc, proj
  ASSERT_EQ(block_tp2, 3744);
  const std::int64_t units = 864 + 4 * block_tp2 + unit(kNormAligned) + 624;
  const std::string tp2 = "parallel.tensor_model_parallel_size=2";
  const MemoryPlan m = estimate(zero3(51, false, 1, {tp2}), 0);
  EXPECT_EQ(at(m, MemoryCategory::kParameters), 4 * (units / kDp + 2 * block_tp2));
  EXPECT_EQ(at(m, MemoryCategory::kOptimizerState), 2 * 4 * units / kDp);
  // The head's shard first (208), then the final norm's, then block 3's (1248 less the 416 + 44 freed before it).
  EXPECT_EQ(at(m, MemoryCategory::kGradients), 4 * units + 4 * (1248 - 416 - 44));
  const MemoryPlan two = estimate(
      zero3(51, false, 1,
            {tp2, "optimizer.zero_stage=2", "optimizer.zero_reduce=per_microbatch", "parallel.dp_bucket_mb=0.04"}),
      0);
  EXPECT_EQ(at(two, MemoryCategory::kGradients), 4 * ((8178 + 8352) / kDp + 8178 + 8352));
  // ZeRO-1 of the same run: the same tp rank's tensors in one flat bucket, each aligned (16528), then a multiple of
  // dp (unaligned: 864 + 4 * 3684 + kFinalNorm + 624 = 16272).
  config::RunConfig one = zero3(51, false, 1, {tp2});
  one.optimizer.zero_stage = 1;
  EXPECT_EQ(at(estimate(one, 0), MemoryCategory::kParameters), 4 * unit(864 + 4 * block_tp2 + kNormAligned + 624));
}

// The units' tensors (partition::block_param_tensors) and the other categories' count (tp_rank_param_count, from the
// cost model) are the same parameters: their elements sum to it for every block of every family at tp 1 and 2, so
// ZeRO-3 differs from ZeRO 0-2 only by the layout.
TEST(MemoryPlanZeroThree, UnitTensorsSumToTheParameterCount) {
  for (const partition::Family& f : partition::families()) {
    const partition::ModelSpec spec = f.make_spec(partition::FamilyConfigs{});
    const auto costs = partition::model_costs(spec);
    for (const int tp : {1, 2}) {
      if (tp > 1 && f.check_tensor_parallel == nullptr) continue;
      for (std::size_t b = 0; b < spec.blocks.size(); ++b) {
        std::int64_t sum = 0;
        for (const partition::ParamTensor& t : partition::block_param_tensors(spec.blocks[b], tp)) sum += t.numel;
        EXPECT_EQ(sum, tp_rank_param_count(spec.blocks[b], costs[b], tp))
            << f.name << " " << spec.blocks[b].name << " tp " << tp;
      }
    }
  }
}

TEST(MemoryPlanZeroThree, OverTheCapMessageEstimatesEachHigherStage) {
  // ZeRO-0 over a cap that ZeRO-3 meets and ZeRO-1 and 2 do not: the message gives each higher stage's need and
  // says which fits.
  config::RunConfig c = zero3(51, false, 1);
  const Plan plan = make_plan(c, 2, 0);
  std::int64_t need[4];
  for (int stage = 0; stage <= 3; ++stage) {
    c.optimizer.zero_stage = stage;
    need[stage] = estimate_rank_memory(plan, c, 0).total();
  }
  ASSERT_LT(need[3], need[1]);
  ASSERT_LT(need[1], need[2]);
  c.optimizer.zero_stage = 0;
  c.device.memory_limit = (need[1] + need[3]) / 2;
  const std::string message = memory_plan_violation(plan, c, unresolved_cpu_kernels(c));
  for (int stage = 1; stage <= 3; ++stage) {
    const std::string estimate = fmt::format("optimizer.zero_stage={} needs about {}", stage, format_bytes(need[stage]));
    const std::string fits = estimate + " (fits)";
    EXPECT_NE(message.find(estimate), std::string::npos) << message;
    EXPECT_EQ(message.find(fits) != std::string::npos, stage == 3) << message;
  }
}

}  // namespace
}  // namespace cleave::run_plan::memory_plan_zero3_test
