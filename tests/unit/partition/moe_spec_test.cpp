// The moe family's spec: llama's block order with moe blocks carrying the mixture's sizes, the family table's
// rows, and the cost model counting every expert's parameters but only k experts' FLOPs (the approximation of
// partition/families/moe_block.cpp).
#include <gtest/gtest.h>

#include "engine/core/error.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition::moe_spec_test {
namespace {

MoeConfig tiny() {
  MoeConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.ffn_hidden_size = 8;
  c.seq_len = 8;
  c.n_experts = 4;
  c.top_k = 2;
  return c;
}

TEST(MoeSpec, LlamaOrderWithMoeBlocks) {
  const ModelSpec spec = make_moe_spec(tiny());
  EXPECT_EQ(spec.type, ModelType::kMoe);
  ASSERT_EQ(spec.blocks.size(), 6u);
  EXPECT_EQ(spec.blocks[0].kind, BlockKind::kEmbedding);
  for (int i : {1, 2}) {
    EXPECT_EQ(spec.blocks[i].kind, BlockKind::kMoeBlock);
    EXPECT_EQ(spec.blocks[i].n_experts, 4);
    EXPECT_EQ(spec.blocks[i].top_k, 2);
    EXPECT_EQ(spec.blocks[i].d_ff, 8);
  }
  EXPECT_EQ(spec.blocks[3].kind, BlockKind::kRmsNorm);
  EXPECT_EQ(make_model_spec(ModelType::kMoe, spec).blocks.size(), 6u);
  EXPECT_TRUE(is_language_model(ModelType::kMoe));
  EXPECT_TRUE(is_repeated_layer(BlockKind::kMoeBlock));
  EXPECT_EQ(family(ModelType::kMoe).name, "moe");
}

TEST(MoeSpec, CostCountsAllExpertsParametersAndKExpertsFlops) {
  MoeConfig c = tiny();
  const BlockCost two = block_cost(make_moe_spec(c).blocks[1]);
  c.n_experts = 8;
  const BlockCost eight = block_cost(make_moe_spec(c).blocks[1]);
  // 4 more experts: 4 · 3 · D · F parameters more, and 4 more router rows.
  EXPECT_EQ(eight.param_count - two.param_count, 4 * 3 * 16 * 8 + 4 * 16);
  // The same k: the experts' FLOPs are the same; only the router's grow (2·T·D per expert and pass).
  EXPECT_DOUBLE_EQ(eight.forward_flops - two.forward_flops, 2.0 * 8 * 16 * 4);
}

TEST(MoeSpec, BadSizesNameTheKey) {
  MoeConfig c = tiny();
  c.top_k = 5;
  try {
    make_moe_spec(c);
    FAIL();
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "model.top_k");
    EXPECT_NE(std::string(e.what()).find("5 is larger than model.n_experts 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::partition::moe_spec_test
