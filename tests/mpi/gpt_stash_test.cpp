// One tp rank's stash of every block of a tiny gpt (embedding, transformer blocks, final LayerNorm, lm head, loss)
// against the cost model's tp layout (partition/families/gpt_block.cpp, partition/cost_model.cpp): LayerNorm and
// column-parallel inputs whole, the rest sharded; after forward activation_bytes per sample, after backward_input
// weight_stash_bytes per sample, at tp = the world size (2 and 4), in every recompute mode, with and without
// sequence parallelism: what the memory plan counts per rank at tp > 1. The run and the byte count are
// support/tp_stash.hpp's, shared with mpi_llama_stash_test and mpi_moe_stash_test.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/enum_names.hpp"
#include "mpi/mpi_test_env.hpp"
#include "partition/families/gpt.hpp"
#include "support/tp_collectives.hpp"
#include "support/tp_stash.hpp"

namespace cleave::layers::gpt_stash_test {
namespace {

partition::ModelSpec tiny_gpt() {
  partition::GptConfig g;
  g.vocab_size = 32;
  g.d_model = 16;
  g.n_layers = 2;
  g.n_heads = 4;
  g.seq_len = 8;  // divisible by tp 2 and 4 (sequence parallelism)
  g.d_ff = 24;
  return partition::make_gpt_spec(g);
}

TEST(GptTensorParallel, StashBytesMatchTheCostModelsTpLayout) {
  auto world = cleave::testing::make_world();
  const auto spec = tiny_gpt();
  const partition::Recompute modes[] = {partition::Recompute::kNone, partition::Recompute::kSelective,
                                        partition::Recompute::kFull};
  for (int run = 0; run < 6; ++run) {
    const bool sp = run >= 3;  // every recompute mode without, then with sequence parallelism
    const partition::Recompute mode = modes[run % 3];
    SCOPED_TRACE(std::string(enum_name(mode)) + (sp ? " sequence parallel" : ""));
    cleave::testing::expect_tp_stash_matches_cost_model(spec, *world, mode, sp);
  }
}

// The tp collectives each block posts per pass, against the list the planner prices (support/tp_collectives.hpp).
TEST(GptTensorParallel, CollectivesMatchTheCostModelsTpComm) {
  auto world = cleave::testing::make_world();
  const auto spec = tiny_gpt();
  for (const bool sp : {false, true}) {
    for (const auto mode : {partition::Recompute::kNone, partition::Recompute::kSelective, partition::Recompute::kFull}) {
      SCOPED_TRACE(std::string(enum_name(mode)) + (sp ? " sequence parallel" : ""));
      cleave::testing::expect_tp_collectives_match_cost_model(spec, *world, mode, sp);
    }
  }
}

}  // namespace
}  // namespace cleave::layers::gpt_stash_test
