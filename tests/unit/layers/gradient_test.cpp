// Every CPU layer's backward_input and backward_weight against central finite differences (float, step
// 1e-2, relative L2 tolerance 1e-2), on small odd shapes with random inputs and randomised parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/core/error.hpp"
#include "layers/activation.hpp"
#include "layers/attention.hpp"
#include "layers/conv2d.hpp"
#include "layers/embedding.hpp"
#include "layers/flatten.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/lm_head.hpp"
#include "layers/maxpool.hpp"
#include "layers/mlp.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "layers/transformer_block.hpp"
#include "layer_test_util.hpp"

namespace cleave::layers::gradient_test {
namespace {

using testing::check_gradients;
using testing::LossWithTargets;
using testing::random_ids;
using testing::random_tensor;
using testing::randomize;

ParamInit gpt_init() {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 77;
  return init;
}

void randomize_all(const Layer& layer, float scale = 0.3f) {
  std::uint64_t s = 900;
  for (auto& p : layer.params()) randomize(*p, ++s, 0.0f, scale);
}

TEST(LayerGradients, LinearWithAndWithoutBias) {
  Context ctx;
  Linear with_bias("fc", 5, 4, true, ParamInit{cpu_allocator()});
  check_gradients(with_bias, random_tensor({2, 3, 5}, 1), ctx);
  EXPECT_EQ(with_bias.params().size(), 2u);
  Linear no_bias("nb", 7, 3, false, ParamInit{cpu_allocator()});
  check_gradients(no_bias, random_tensor({5, 7}, 2), ctx);
  EXPECT_EQ(no_bias.params().size(), 1u);
}

TEST(LayerGradients, LinearRejectsWrongInputWidth) {
  Context ctx;
  Linear fc("layers.0", 5, 4, true, ParamInit{cpu_allocator()});
  Stash stash;
  try {
    fc.forward(random_tensor({2, 6}, 1), stash, ctx);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear layers.0: expected input [..., 5], got [2,6]"), std::string::npos)
        << e.what();
  }
}

TEST(LayerGradients, LayerNorm) {
  Context ctx;
  LayerNorm ln("ln", 7, gpt_init());
  randomize(*ln.params()[0], 3, 1.0f, 0.3f);
  randomize(*ln.params()[1], 4, 0.0f, 0.3f);
  check_gradients(ln, random_tensor({3, 4, 7}, 5, 2.0f), ctx);
}

TEST(LayerGradients, GeluAndRelu) {
  Context ctx;
  Gelu gelu;
  check_gradients(gelu, random_tensor({3, 11}, 6, 1.5f), ctx);
  // ReLU has a kink at 0: keep every input at least 0.1 away from it so the step never crosses it.
  Tensor x = random_tensor({4, 9}, 7);
  for (float& v : x.span<float>()) v = v >= 0 ? v + 0.1f : v - 0.1f;
  Relu relu;
  check_gradients(relu, x, ctx);
}

TEST(LayerGradients, Embedding) {
  Context ctx;
  Embedding embed("embed", 13, 6, 5, gpt_init());
  Tensor ids = random_ids({3, 4}, 13, 8);  // T = 4 < seq_len = 6: only the first positions are used
  check_gradients(embed, ids, ctx);
  // Rows of unused positions get no gradient; the token table's gradient sums repeated ids.
  Stash stash;
  embed.forward(ids, stash, ctx);
  testing::zero_grads(embed);
  Tensor dx = embed.backward(random_tensor({3, 4, 5}, 9), stash, ctx);
  EXPECT_FALSE(dx.defined());
  const float* dpos = embed.position_table()->grad.data<float>();
  for (int i = 4 * 5; i < 6 * 5; ++i) EXPECT_EQ(dpos[i], 0.0f);
}

TEST(LayerGradients, EmbeddingRejectsLongSequences) {
  Context ctx;
  Embedding embed("embed", 13, 6, 5, gpt_init());
  Stash stash;
  EXPECT_THROW(embed.forward(random_ids({1, 7}, 13, 1), stash, ctx), Error);
}

TEST(LayerGradients, CausalSelfAttention) {
  Context ctx;
  CausalSelfAttention attn("attn", 8, 2, gpt_init(), gpt_init());
  randomize_all(attn, 0.4f);
  check_gradients(attn, random_tensor({2, 5, 8}, 10), ctx);
}

TEST(LayerGradients, CausalSelfAttentionIsCausal) {
  Context ctx;
  CausalSelfAttention attn("attn", 8, 2, gpt_init(), gpt_init());
  randomize_all(attn, 0.4f);
  Tensor x = random_tensor({1, 6, 8}, 11);
  Stash s1, s2;
  const auto before = attn.forward(x, s1, ctx).to_floats();
  for (int c = 0; c < 8; ++c) x.data<float>()[4 * 8 + c] += 1.0f;  // change token 4
  const auto after = attn.forward(x, s2, ctx).to_floats();
  for (int i = 0; i < 4 * 8; ++i) EXPECT_EQ(before[i], after[i]) << "output before position 4 changed";
  double changed = 0;
  for (int i = 4 * 8; i < 6 * 8; ++i) changed += std::abs(before[i] - after[i]);
  EXPECT_GT(changed, 1e-3);
}

TEST(LayerGradients, Mlp) {
  Context ctx;
  Mlp mlp("mlp", 6, 10, gpt_init(), gpt_init());
  randomize_all(mlp, 0.4f);
  check_gradients(mlp, random_tensor({2, 3, 6}, 12), ctx);
}

TEST(LayerGradients, TransformerBlock) {
  Context ctx;
  TransformerBlock block("blocks.0", 8, 2, 12, 2, gpt_init());
  randomize_all(block, 0.3f);
  for (auto& p : block.params()) {
    if (p->name.ends_with("ln1.weight") || p->name.ends_with("ln2.weight")) randomize(*p, 41, 1.0f, 0.2f);
  }
  check_gradients(block, random_tensor({2, 5, 8}, 13), ctx);
}

TEST(LayerGradients, Conv2d) {
  Context ctx;
  Conv2d conv("conv", 3, 4, 3, ParamInit{cpu_allocator()});
  check_gradients(conv, random_tensor({2, 3, 5, 6}, 14), ctx);
  Conv2d strided("strided", 2, 3, 3, ParamInit{cpu_allocator()}, 2, 0);
  check_gradients(strided, random_tensor({1, 2, 7, 6}, 15), ctx);
}

TEST(LayerGradients, MaxPool) {
  Context ctx;
  // Distinct values 0.05 apart in random order: a step of 1e-2 never changes which input wins a window.
  Tensor x = Tensor::empty({2, 3, 6, 5}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  std::vector<int> order(static_cast<std::size_t>(x.numel()));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[rng::bits64(3, 4, i) % (i + 1)]);
  }
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.05f * static_cast<float>(order[i]) - 4.0f;
  MaxPool pool("pool", 6, 5, 2);  // 5 is odd: the last column is dropped
  EXPECT_EQ(pool.out_height(), 3);
  EXPECT_EQ(pool.out_width(), 2);
  check_gradients(pool, x, ctx, {1e-2f, 1e-3, 96});
}

TEST(LayerGradients, Flatten) {
  Context ctx;
  Flatten flat(Shape{3, 2, 4});
  Tensor x = random_tensor({2, 3, 2, 4}, 16);
  Stash stash;
  Tensor y = flat.forward(x, stash, ctx);
  EXPECT_EQ(y.shape(), Shape({2, 24}));
  EXPECT_EQ(y.raw_data(), x.raw_data());
  EXPECT_TRUE(stash.empty());
  Tensor dx = flat.backward(random_tensor({2, 24}, 17), stash, ctx);
  EXPECT_EQ(dx.shape(), x.shape());
}

TEST(LayerGradients, LmHead) {
  Context ctx;
  auto table = make_token_table("embed", 9, 6, gpt_init());
  randomize(*table, 18);
  LmHead head("head", table, true);
  EXPECT_EQ(head.params().size(), 1u);
  EXPECT_EQ(head.params()[0]->name, "embed.token");
  check_gradients(head, random_tensor({2, 3, 6}, 19), ctx);
}

TEST(LayerGradients, SoftmaxCrossEntropyValueAndGradient) {
  Context ctx;
  const std::int64_t rows = 6, classes = 7;
  Tensor logits = random_tensor({2, 3, classes}, 20, 2.0f);
  Tensor targets = random_ids({2, 3}, classes, 21);
  targets.data<std::int32_t>()[2] = -1;  // ignored
  targets.data<std::int32_t>()[4] = -1;
  SoftmaxCrossEntropy loss;
  Stash stash;
  Tensor out = loss.forward(logits, targets, stash, ctx);
  EXPECT_EQ(out.numel(), 1);
  // Double-precision reference: mean over the 4 valid rows.
  double expected = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const int t = targets.data<std::int32_t>()[r];
    if (t < 0) continue;
    const float* row = logits.data<float>() + r * classes;
    double mx = row[0];
    for (int c = 1; c < classes; ++c) mx = std::max<double>(mx, row[c]);
    double s = 0;
    for (int c = 0; c < classes; ++c) s += std::exp(row[c] - mx);
    expected += std::log(s) + mx - row[t];
  }
  expected /= 4;
  EXPECT_NEAR(out.data<float>()[0], expected, 1e-5);

  // The loss scale: dy = 0.5 halves dlogits; ignored rows get zero gradient.
  Tensor dy = Tensor::from_floats(std::vector<float>{0.5f}, Shape{});
  Tensor dlogits = loss.backward(dy, stash, ctx);
  EXPECT_TRUE(stash.empty());
  for (int c = 0; c < classes; ++c) EXPECT_EQ(dlogits.data<float>()[2 * classes + c], 0.0f);
  double row_sum = 0;
  for (int c = 0; c < classes; ++c) row_sum += dlogits.data<float>()[c];
  EXPECT_NEAR(row_sum, 0.0, 1e-6);  // softmax - onehot sums to zero
  LossWithTargets bound(loss, targets);
  check_gradients(bound, logits, ctx);
}

TEST(LayerGradients, SoftmaxCrossEntropyNeedsTargets) {
  Context ctx;
  SoftmaxCrossEntropy loss;
  Stash stash;
  EXPECT_THROW(loss.forward(random_tensor({4, 3}, 1), stash, ctx), Error);  // the Layer entry point has none
  EXPECT_THROW(loss.forward(random_tensor({4, 3}, 1), Tensor(), stash, ctx), Error);
  EXPECT_THROW(loss.forward(random_tensor({4, 3}, 1), random_ids({5}, 3, 2), stash, ctx), Error);
}

}  // namespace
}  // namespace cleave::layers::gradient_test
