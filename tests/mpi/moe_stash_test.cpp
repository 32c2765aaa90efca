// One tp rank's moe block stash against the cost model's tp layout (partition/families/moe_block.cpp), the
// numbers the memory plan and the split backward's weight stash count per rank: after forward activation_bytes
// per sample, after backward_input weight_stash_bytes per sample plus the E f32 expert counts of the micro-batch,
// at tp = the world size, with and without sequence parallelism, with no, plain and gated (Qwen2-MoE) shared
// experts. The run and the byte count (distinct storages) are support/tp_stash.hpp's (mpi_gpt_stash_test). Every
// block: the embedding, final norm, head and loss too (the embedding's weight stash under sequence parallelism,
// 800 B per sample here, was costed 352 B until its tokens came from the ids' shape; mpi_llama_stash_test).
#include <gtest/gtest.h>

#include <string>

#include "engine/core/enum_names.hpp"

#include "mpi/mpi_test_env.hpp"
#include "partition/families/moe.hpp"
#include "support/tp_collectives.hpp"
#include "support/tp_stash.hpp"

namespace cleave::layers::moe_stash_test {
namespace {

partition::MoeConfig tiny_moe() {
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
  return m;
}

TEST(MoeTensorParallel, StashBytesMatchTheCostModelsTpLayout) {
  auto world = cleave::testing::make_world();
  partition::MoeConfig m = tiny_moe();
  const char* const names[] = {"plain", "shared", "gated shared"};
  for (int run = 0; run < 6; ++run) {
    const bool sp = run >= 3;
    const int variant = run % 3;
    SCOPED_TRACE(std::string(names[variant]) + (sp ? " sequence parallel" : ""));
    m.n_shared_experts = variant > 0 ? 2 : 0;
    m.shared_expert_gate = variant == 2;
    const auto spec = partition::make_moe_spec(m);
    cleave::testing::expect_tp_stash_matches_cost_model(spec, *world, partition::Recompute::kNone, sp);
  }
}

// The tp collectives each block posts per pass, against the list the planner prices (support/tp_collectives.hpp):
// the router's combine-weight gradient too, with no, plain and gated shared experts.
TEST(MoeTensorParallel, CollectivesMatchTheCostModelsTpComm) {
  auto world = cleave::testing::make_world();
  partition::MoeConfig m = tiny_moe();
  const char* const names[] = {"plain", "shared", "gated shared"};
  for (int variant = 0; variant < 3; ++variant) {
    m.n_shared_experts = variant > 0 ? 2 : 0;
    m.shared_expert_gate = variant == 2;
    const auto spec = partition::make_moe_spec(m);
    for (const bool sp : {false, true}) {
      for (const auto mode : {partition::Recompute::kNone, partition::Recompute::kFull}) {
        SCOPED_TRACE(std::string(names[variant]) + " " + std::string(enum_name(mode)) +
                     (sp ? " sequence parallel" : ""));
        cleave::testing::expect_tp_collectives_match_cost_model(spec, *world, mode, sp);
      }
    }
  }
}

}  // namespace
}  // namespace cleave::layers::moe_stash_test
