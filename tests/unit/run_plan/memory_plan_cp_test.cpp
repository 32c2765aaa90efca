// The memory plan's context-parallel exchange term (run_plan::cp_exchange_bytes, memory_plan.hpp): the buffers ring
// and all_to_all hold while one attention block runs, by hand for the GPT and the grouped-query Llama of
// tests/e2e/context_parallel_test.cpp's memory runs (where the allocator measures them), at cp 2 and 4, tp 2 and in
// bf16; and the plan's communication category carries it (on top of the bf16 gradient twins), nothing at cp 1.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan::memory_plan_cp_test {
namespace {

// T 64, D 32: GPT with 4 heads (K = D), Llama with 8 query heads over 4 kv heads (hd 4, K = 16).
partition::BlockSpec attention_block(std::int64_t n_heads, std::int64_t n_kv_heads) {
  partition::BlockSpec b;
  b.kind = partition::BlockKind::kTransformerBlock;
  b.in_features = 32;
  b.seq_len = 64;
  b.n_heads = n_heads;
  b.n_kv_heads = n_kv_heads;
  return b;
}

constexpr bool kRing = true, kAllToAll = false;

TEST(MemoryPlanCp, RingHoldsThreeKvBlocksAtCpTwoAndFourFromCpThree) {
  const auto gpt = attention_block(4, 0), llama = attention_block(8, 4);
  // U = micro 2 x Tl x 2K x 4 B. GPT cp2: Tl 32, K 32: U = 16 KiB, 3U; cp4: Tl 16, U = 8 KiB, 4U.
  EXPECT_EQ(cp_exchange_bytes(gpt, 2, 1, 2, kRing, 4), 3 * 2 * 32 * 64 * 4);
  EXPECT_EQ(cp_exchange_bytes(gpt, 2, 1, 4, kRing, 4), 4 * 2 * 16 * 64 * 4);
  EXPECT_EQ(cp_exchange_bytes(gpt, 2, 1, 3, kRing, 4), 4 * 2 * (64 / 3) * 64 * 4);  // cp 3 holds as many as cp 4
  // Llama: K = 4 kv heads x hd 4 = 16 columns; tp 2 halves them.
  EXPECT_EQ(cp_exchange_bytes(llama, 2, 1, 2, kRing, 4), 3 * 2 * 32 * 32 * 4);
  EXPECT_EQ(cp_exchange_bytes(llama, 2, 2, 2, kRing, 4), 3 * 2 * 32 * 16 * 4);
  // bf16 halves the K/V blocks' bytes, not the travelling dK/dV's (f32 accumulation).
  EXPECT_EQ(cp_exchange_bytes(llama, 2, 1, 4, kRing, 2), 2 * 2 * 16 * 32 * 4 + 2 * 2 * 16 * 32 * 2);
}

TEST(MemoryPlanCp, AllToAllHoldsCpSendAndCpMinusOneReceiveBlocksOfQkv) {
  const auto gpt = attention_block(4, 0), llama = attention_block(8, 4);
  // GPT: q | k | v is 96 columns; a block of it is 96 / cp. cp2: 3 blocks of [2, 32, 48]; cp4: 7 of [2, 16, 24].
  EXPECT_EQ(cp_exchange_bytes(gpt, 2, 1, 2, kAllToAll, 4), 3 * 2 * 32 * 48 * 4);
  EXPECT_EQ(cp_exchange_bytes(gpt, 2, 1, 4, kAllToAll, 4), 7 * 2 * 16 * 24 * 4);
  // Llama: 32 + 2 x 16 = 64 columns; at tp 2, 32.
  EXPECT_EQ(cp_exchange_bytes(llama, 2, 1, 2, kAllToAll, 4), 3 * 2 * 32 * 32 * 4);
  EXPECT_EQ(cp_exchange_bytes(llama, 2, 2, 2, kAllToAll, 2), 3 * 2 * 32 * 16 * 2);
}

TEST(MemoryPlanCp, NothingWithoutCpOrAttention) {
  EXPECT_EQ(cp_exchange_bytes(attention_block(4, 0), 2, 1, 1, kRing, 4), 0);
  partition::BlockSpec embedding;
  embedding.kind = partition::BlockKind::kEmbedding;
  embedding.seq_len = 64;
  EXPECT_EQ(cp_exchange_bytes(embedding, 2, 1, 2, kRing, 4), 0);
}

config::RunConfig gpt_at(int world, const std::vector<std::string>& overrides) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 4, "seq_len": 64},
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}, "data": {"type": "synthetic"}})",
                                             "<string>", overrides);
  c.resolve(world);
  return c;
}

MemoryPlan plan_of(const config::RunConfig& c) {
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
  return estimate_rank_memory(plan, c, 0);
}

std::int64_t communication(const MemoryPlan& m) {
  return m.bytes[static_cast<std::size_t>(MemoryCategory::kCommunication)];
}

TEST(MemoryPlanCp, TheCommunicationCategoryCarriesTheTerm) {
  const MemoryPlan one = plan_of(gpt_at(1, {}));
  EXPECT_EQ(one.cp_exchange, 0);
  EXPECT_EQ(communication(one), 0);
  const MemoryPlan ring = plan_of(gpt_at(2, {"parallel.context_parallel_size=2", "parallel.context_parallel_comm=ring"}));
  EXPECT_EQ(ring.cp_exchange, 3 * 2 * 32 * 64 * 4);
  EXPECT_EQ(communication(ring), ring.cp_exchange);
  const MemoryPlan a2a =
      plan_of(gpt_at(4, {"parallel.context_parallel_size=4", "parallel.context_parallel_comm=all_to_all"}));
  EXPECT_EQ(a2a.cp_exchange, 7 * 2 * 16 * 24 * 4);
  EXPECT_EQ(communication(a2a), a2a.cp_exchange);
  // The bf16 gradient twins (dp x cp = 4 > 1) and the exchange add up.
  const MemoryPlan twins = plan_of(gpt_at(4, {"parallel.context_parallel_size=2", "parallel.grad_reduce_dtype=bf16"}));
  const MemoryPlan no_cp = plan_of(gpt_at(4, {"parallel.grad_reduce_dtype=bf16"}));
  EXPECT_GT(communication(no_cp), 0);
  EXPECT_EQ(no_cp.cp_exchange, 0);
  EXPECT_EQ(communication(twins), communication(no_cp) + twins.cp_exchange);
}

// The exchange buffers live only while their attention block runs (layers/context_parallel), so the total counts
// what they add above the activation peak, not their own peak on top of it (before: ring +2.04% / +1.95% over the
// measured total at cp2 / cp4, ContextParallel.ActivationMemoryFollowsThePlan). This model (GPipe: every micro-batch
// stashed, then the backward) peaks in an attention block's backward: ring holds the received K/V block and the
// travelling dK/dV there (2U, U = micro 2 x Tl 32 x 2K 64 x 4 B, while dqkv is assembled), all_to_all the exchange
// of dqkv back (the whole term) one [micro, Tl, D] under it: gpt's core runs the qkv projection's backward after the
// exchange, whose partial dx is the block's peak (before, at the peak: the measured total +8,192 B over); the loop's
// 3U come while dqkv is not yet allocated (less than 2U above that).
TEST(MemoryPlanCp, TheTotalHoldsTheExchangeOnlyInsideItsBlock) {
  const auto sum = [](const MemoryPlan& m) {
    std::int64_t all = 0;
    for (std::int64_t b : m.bytes) all += b;
    return all;
  };
  for (const char* schedule : {"gpipe", "1f1b"}) {
    SCOPED_TRACE(schedule);
    const std::string s = std::string("parallel.schedule=") + schedule;
    const MemoryPlan ring =
        plan_of(gpt_at(2, {"parallel.context_parallel_size=2", "parallel.context_parallel_comm=ring", s}));
    const std::int64_t unit = 2 * 32 * 64 * 4;
    EXPECT_EQ(ring.transients_in_categories, ring.cp_exchange);  // no CPU facts: no attention scratch
    EXPECT_EQ(ring.transients_above_activations, 2 * unit);
    EXPECT_EQ(ring.total(), sum(ring) - 3 * unit + 2 * unit);
    const MemoryPlan a2a =
        plan_of(gpt_at(2, {"parallel.context_parallel_size=2", "parallel.context_parallel_comm=all_to_all", s}));
    const std::int64_t dx = 2 * 32 * 32 * 4;  // [micro, Tl, D] f32
    EXPECT_EQ(a2a.transients_above_activations, a2a.cp_exchange - dx);
    EXPECT_EQ(a2a.total(), sum(a2a) - dx);
  }
  // Without cp nothing changes: the total is the categories' sum.
  const MemoryPlan one = plan_of(gpt_at(1, {}));
  EXPECT_EQ(one.transients_in_categories, 0);
  EXPECT_EQ(one.transients_above_activations, 0);
  EXPECT_EQ(one.total(), sum(one));
}

}  // namespace
}  // namespace cleave::run_plan::memory_plan_cp_test
