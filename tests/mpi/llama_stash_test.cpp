// One tp rank's stash of every block of a tiny llama (embedding, llama blocks, final RMSNorm, lm head, loss)
// against the cost model's tp layout (partition/families/llama_block.cpp, partition/cost_model.cpp): after forward
// activation_bytes per sample, after backward_input weight_stash_bytes per sample (what a zero-bubble schedule's W
// keeps between I and W), at tp = the world size, with and without sequence parallelism, in every recompute mode,
// with grouped-query attention, and with Qwen3's q/k norms and qkv biases. Bytes of distinct storages, as
// TensorParallel.StashBytesMatchTheCostModelsTpLayout (mpi_layers_parallel_test) counts them for gpt.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/core/enum_names.hpp"
#include "layers/models/builder.hpp"
#include "mpi/mpi_test_env.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/llama.hpp"
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

TEST(LlamaTensorParallel, StashBytesMatchTheCostModelsTpLayout) {
  auto world = cleave::testing::make_world();
  const int tp = world->size();
  const std::int64_t batch = 3;
  const partition::Recompute modes[] = {partition::Recompute::kNone, partition::Recompute::kSelective,
                                        partition::Recompute::kFull};
  for (int variant = 0; variant < 2; ++variant) {
    partition::LlamaConfig c;
    c.vocab_size = 32;
    c.d_model = 16;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.seq_len = 8;  // divisible by tp 2 and 4 (sequence parallelism)
    c.ffn_hidden_size = 8;
    c.qk_norm = variant == 1;
    c.qkv_bias = variant == 1;
    const auto spec = partition::make_llama_spec(partition::llama_defaults(c));
    for (int run = 0; run < 6; ++run) {
      const bool sp = run >= 3;  // every recompute mode without, then with sequence parallelism
      const partition::Recompute mode = modes[run % 3];
      SCOPED_TRACE(std::string(variant == 1 ? "qk_norm qkv_bias " : "") + std::string(enum_name(mode)) +
                   (sp ? " sequence parallel" : ""));
      BuildOptions options{cpu_allocator()};
      options.tp_size = tp;
      options.tp_rank = world->rank();
      options.recompute = mode;
      auto layers = build_blocks(spec, 0, spec.blocks.size(), options);
      Context ctx;
      ctx.tp_comm = world.get();
      ctx.sequence_parallel = sp;
      const Tensor targets = testing::random_ids(Shape{batch, c.seq_len}, c.vocab_size, 61);
      Tensor x = testing::random_ids(Shape{batch, c.seq_len}, c.vocab_size, 62);
      std::vector<Stash> stashes(layers.size());
      for (std::size_t i = 0; i < layers.size(); ++i) {
        x = forward_block(*layers[i], x, targets, stashes[i], ctx);
        std::set<const void*> seen;
        EXPECT_EQ(distinct_stash_bytes(stashes[i], seen),
                  partition::block_cost(spec.blocks[i], DType::kF32, mode, tp, sp).activation_bytes * batch)
            << spec.blocks[i].name << " after forward";
      }
      Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{1});
      for (std::size_t i = layers.size(); i-- > 0;) {
        dy = layers[i]->backward_input(dy, stashes[i], ctx);
        std::set<const void*> seen;
        EXPECT_EQ(distinct_stash_bytes(stashes[i], seen),
                  partition::block_cost(spec.blocks[i], DType::kF32, mode, tp, sp).weight_stash_bytes * batch)
            << spec.blocks[i].name << " after backward_input";
      }
    }
  }
}

}  // namespace
}  // namespace cleave::layers
