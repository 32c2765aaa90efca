// One tp rank's moe block stash against the cost model's tp layout (partition/families/moe_block.cpp), the
// numbers the memory plan and the split backward's weight stash count per rank: after forward activation_bytes
// per sample, after backward_input weight_stash_bytes per sample plus the E f32 expert counts of the micro-batch,
// at tp = the world size, with and without sequence parallelism, with no, plain and gated (Qwen2-MoE) shared
// experts. Bytes of distinct storages, as TensorParallel.StashBytesMatchTheCostModelsTpLayout counts them. Every
// block: the embedding, final norm, head and loss too (the embedding's weight stash under sequence parallelism,
// 800 B per sample here, was costed 352 B until its tokens came from the ids' shape; mpi_llama_stash_test).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "layers/models/builder.hpp"
#include "mpi/mpi_test_env.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"
#include "unit/layers/layer_test_util.hpp"

namespace cleave::layers {
namespace {

std::int64_t distinct_stash_bytes(const Stash& stash, std::set<const void*>& seen) {
  std::int64_t bytes = 0;
  for (const Tensor& t : stash.tensors) {
    if (t.defined() && seen.insert(t.storage().get()).second) bytes += static_cast<std::int64_t>(t.storage()->bytes());
  }
  for (const Stash& child : stash.children) bytes += distinct_stash_bytes(child, seen);
  return bytes;
}

TEST(MoeTensorParallel, StashBytesMatchTheCostModelsTpLayout) {
  auto world = cleave::testing::make_world();
  const int tp = world->size();
  partition::MoeConfig m;
  m.vocab_size = 32;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.seq_len = 8;  // divisible by tp 2 and 4 (sequence parallelism)
  m.ffn_hidden_size = 8;
  m.n_experts = 4;
  m.top_k = 2;
  const std::int64_t batch = 3;
  const char* const names[] = {"plain", "shared", "gated shared"};
  for (int run = 0; run < 6; ++run) {
    const bool sp = run >= 3;
    const int variant = run % 3;
    SCOPED_TRACE(std::string(names[variant]) + (sp ? " sequence parallel" : ""));
    m.n_shared_experts = variant > 0 ? 2 : 0;
    m.shared_expert_gate = variant == 2;
    const auto spec = partition::make_moe_spec(m);
    BuildOptions options{cpu_allocator()};
    options.tp_size = tp;
    options.tp_rank = world->rank();
    auto layers = build_blocks(spec, 0, spec.blocks.size(), options);
    Context ctx;
    ctx.tp_comm = world.get();
    ctx.sequence_parallel = sp;
    const Tensor targets = testing::random_ids(Shape{batch, m.seq_len}, m.vocab_size, 61);
    Tensor x = testing::random_ids(Shape{batch, m.seq_len}, m.vocab_size, 62);
    std::vector<Stash> stashes(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      x = forward_block(*layers[i], x, targets, stashes[i], ctx);
      std::set<const void*> seen;
      const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, partition::Recompute::kNone, tp, sp);
      EXPECT_EQ(distinct_stash_bytes(stashes[i], seen), cost.activation_bytes * batch)
          << spec.blocks[i].name << " after forward";
    }
    Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{1});
    for (std::size_t i = layers.size(); i-- > 0;) {
      dy = layers[i]->backward_input(dy, stashes[i], ctx);
      std::set<const void*> seen;
      const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, partition::Recompute::kNone, tp, sp);
      const bool moe = spec.blocks[i].kind == partition::BlockKind::kMoeBlock;
      EXPECT_EQ(distinct_stash_bytes(stashes[i], seen), cost.weight_stash_bytes * batch + (moe ? m.n_experts * 4 : 0))
          << spec.blocks[i].name << " after backward_input";
    }
  }
}

}  // namespace
}  // namespace cleave::layers
