// Shared by the moe block tests (moe_test.cpp, moe_shared_gate_test.cpp): the one-layer moe whose block's parameters
// they list, and the listing, which also holds the block's parameter count to the cost model's (a parameter the
// block makes and the cost model misses, or the reverse, fails every listing test).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "layers/moe/moe_block.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/moe.hpp"

namespace cleave::layers::testing {

// One layer of a moe: vocabulary 11, d_model 8, 2 heads, sequence 4, 3 experts of width 6, top-2. A test sets the
// keys it is about (shared experts, the router, biases) on top.
inline partition::MoeConfig one_layer_moe() {
  partition::MoeConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.ffn_hidden_size = 6;
  c.seq_len = 4;
  c.n_experts = 3;
  c.top_k = 2;
  return c;
}

// The parameters of c's moe block (its spec's block 1, built with `init`) as "name [shape]", in order; expects their
// element count to be the cost model's for the block.
inline std::vector<std::string> moe_block_params(const partition::MoeConfig& c, const ParamInit& init) {
  const partition::ModelSpec spec = partition::make_moe_spec(c);
  const auto block = make_moe_block(spec.blocks[1], spec.moe, init, 1, 0);
  std::vector<std::string> names;
  std::int64_t count = 0;
  for (const auto& p : block->params()) {
    names.push_back(p->name + " " + p->value.shape().str());
    count += p->value.numel();
  }
  EXPECT_EQ(count, partition::block_cost(spec.blocks[1]).param_count) << "the cost model counts every parameter";
  return names;
}

}  // namespace cleave::layers::testing
