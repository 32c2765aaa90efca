// The null gradients the families declare (partition::null_gradients, BlockRules::null_gradients), checked on the
// layers that own them: each declared slice names a parameter the block really has, its gradient vanishes up to
// rounding for random inputs and parameters while the rest of that parameter's gradient does not, and perturbing
// the slice leaves the output unchanged up to rounding. `cleave verify` relies on this (engine/train/verify_compare.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "layers/transformer_block.hpp"
#include "layer_test_util.hpp"
#include "partition/families/family.hpp"
#include "partition/model_spec.hpp"

namespace cleave::layers::null_gradient_test {
namespace {

using testing::random_tensor;
using testing::randomize;

ParamInit gpt_init() {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 7;
  return init;
}

TEST(NullGradients, GptKeyBiasGradientVanishesAndTheRestDoesNot) {
  partition::GptConfig config;
  config.d_model = 8;
  config.n_heads = 2;
  config.n_layers = 1;
  config.seq_len = 6;
  const std::vector<partition::NullGradient> slices = partition::null_gradients(partition::make_gpt_spec(config));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].param, "blocks.0.attn.qkv.bias");
  EXPECT_EQ(slices[0].begin, 8);
  EXPECT_EQ(slices[0].end, 16);

  Context ctx;
  TransformerBlock block("blocks.0", 8, 2, 32, 1, gpt_init());
  for (auto& p : block.params()) randomize(*p, 17, 0.0f, 0.4f);
  auto params = block.params();
  auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p->name == slices[0].param; });
  ASSERT_NE(it, params.end()) << slices[0].param << " is not a parameter of the block";
  Param& bias = **it;

  const Tensor x = random_tensor({2, 6, 8}, 23);
  Stash stash;
  const Tensor y = block.forward(x, stash, ctx);
  for (auto& p : block.params()) p->grad.zero_();
  block.backward_input(random_tensor(y.shape(), 29), stash, ctx);
  block.backward_weight(stash, ctx);
  const float* g = bias.grad.data<float>();
  double in_slice = 0, outside = 0;
  for (std::int64_t i = 0; i < bias.grad.numel(); ++i) {
    double& max = i >= slices[0].begin && i < slices[0].end ? in_slice : outside;
    max = std::max(max, std::abs(static_cast<double>(g[i])));
  }
  EXPECT_GT(outside, 1e-2) << "the query and value biases' gradient should not vanish";
  EXPECT_LT(in_slice, 1e-5 * outside) << "the key bias gradient is not zero up to rounding";

  // The output itself does not depend on the slice: shift it by a lot, the output moves by rounding only.
  float* b = bias.value.data<float>();
  for (std::int64_t i = slices[0].begin; i < slices[0].end; ++i) b[i] += 1.0f;
  Stash shifted;
  const auto before = y.to_floats();
  const auto after = block.forward(x, shifted, ctx).to_floats();
  double moved = 0, scale = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    moved = std::max(moved, std::abs(static_cast<double>(before[i]) - after[i]));
    scale = std::max(scale, std::abs(static_cast<double>(before[i])));
  }
  EXPECT_LT(moved, 1e-5 * scale);
}

TEST(NullGradients, RotaryFamiliesDeclareNone) {
  // A rotary key bias is rotated by its position, so q . R_j b_k differs per key: not a null direction.
  partition::LlamaConfig llama;
  llama.qkv_bias = true;
  EXPECT_TRUE(partition::null_gradients(partition::make_llama_spec(partition::llama_defaults(llama))).empty());
}

}  // namespace
}  // namespace cleave::layers::null_gradient_test
