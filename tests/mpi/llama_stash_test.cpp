// One tp rank's stash of every block of a tiny llama (embedding, llama blocks, final RMSNorm, lm head, loss)
// against the cost model's tp layout (partition/families/llama_block.cpp, partition/cost_model.cpp): after forward
// activation_bytes per sample, after backward_input weight_stash_bytes per sample (what a zero-bubble schedule's W
// keeps between I and W), at tp = the world size, with and without sequence parallelism, in every recompute mode,
// with grouped-query attention, and with Qwen3's q/k norms and qkv biases. The run and the byte count (distinct
// storages) are support/tp_stash.hpp's, shared with mpi_gpt_stash_test and mpi_moe_stash_test.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/enum_names.hpp"
#include "mpi/mpi_test_env.hpp"
#include "partition/families/llama.hpp"
#include "support/tp_collectives.hpp"
#include "support/tp_stash.hpp"

namespace cleave::layers::llama_stash_test {
namespace {

partition::ModelSpec tiny_llama(bool qk_norm, bool qkv_bias) {
  partition::LlamaConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.seq_len = 8;  // divisible by tp 2 and 4 (sequence parallelism)
  c.ffn_hidden_size = 8;
  c.qk_norm = qk_norm;
  c.qkv_bias = qkv_bias;
  return partition::make_llama_spec(partition::llama_defaults(c));
}

TEST(LlamaTensorParallel, StashBytesMatchTheCostModelsTpLayout) {
  auto world = cleave::testing::make_world();
  const partition::Recompute modes[] = {partition::Recompute::kNone, partition::Recompute::kSelective,
                                        partition::Recompute::kFull};
  for (int variant = 0; variant < 2; ++variant) {
    const auto spec = tiny_llama(variant == 1, variant == 1);
    for (int run = 0; run < 6; ++run) {
      const bool sp = run >= 3;  // every recompute mode without, then with sequence parallelism
      const partition::Recompute mode = modes[run % 3];
      SCOPED_TRACE(std::string(variant == 1 ? "qk_norm qkv_bias " : "") + std::string(enum_name(mode)) +
                   (sp ? " sequence parallel" : ""));
      cleave::testing::expect_tp_stash_matches_cost_model(spec, *world, mode, sp);
    }
  }
}

// The tp collectives each block posts per pass, against the list the planner prices (support/tp_collectives.hpp).
TEST(LlamaTensorParallel, CollectivesMatchTheCostModelsTpComm) {
  auto world = cleave::testing::make_world();
  for (const bool qk_norm : {false, true}) {  // Qwen3's q/k norms: their weight gradients' all-reduces at plain tp
    const auto spec = tiny_llama(qk_norm, false);
    for (const bool sp : {false, true}) {
      for (const auto mode :
           {partition::Recompute::kNone, partition::Recompute::kSelective, partition::Recompute::kFull}) {
        SCOPED_TRACE(std::string(qk_norm ? "qk_norm " : "") + std::string(enum_name(mode)) +
                     (sp ? " sequence parallel" : ""));
        cleave::testing::expect_tp_collectives_match_cost_model(spec, *world, mode, sp);
      }
    }
  }
}

}  // namespace
}  // namespace cleave::layers::llama_stash_test
