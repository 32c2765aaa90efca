// Model builders: parameter names, shapes, counts and init for a tiny gpt; tied tables shared within a
// range and copied (same name, same values) across ranges; whole-model forward loss ≈ ln(vocab); whole
// model gradients against finite differences for gpt, mlp and cnn.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/core/error.hpp"
#include "layers/embedding.hpp"
#include "layers/lm_head.hpp"
#include "layers/models/builder.hpp"
#include "layer_test_util.hpp"
#include "partition/cost_model.hpp"

namespace cleave::layers::builder_test {
namespace {

BuildOptions seeded(std::uint64_t seed) {
  BuildOptions options = testing::on_host();
  options.seed = seed;
  return options;
}

using testing::on_host;
using testing::random_ids;
using testing::random_tensor;

partition::ModelSpec tiny_gpt(bool tied = true) {
  partition::GptConfig c;
  c.vocab_size = 65;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.seq_len = 16;
  c.tie_embeddings = tied;
  return partition::make_gpt_spec(c);
}

std::vector<std::pair<std::string, Shape>> expected_gpt_params(bool tied) {
  std::vector<std::pair<std::string, Shape>> out = {{"embed.token", {65, 32}}, {"embed.position", {16, 32}}};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    out.insert(out.end(), {{b + ".ln1.weight", {32}},
                           {b + ".ln1.bias", {32}},
                           {b + ".attn.qkv.weight", {96, 32}},
                           {b + ".attn.qkv.bias", {96}},
                           {b + ".attn.proj.weight", {32, 32}},
                           {b + ".attn.proj.bias", {32}},
                           {b + ".ln2.weight", {32}},
                           {b + ".ln2.bias", {32}},
                           {b + ".mlp.fc.weight", {128, 32}},
                           {b + ".mlp.fc.bias", {128}},
                           {b + ".mlp.proj.weight", {32, 128}},
                           {b + ".mlp.proj.bias", {32}}});
  }
  out.insert(out.end(), {{"final_norm.weight", {32}}, {"final_norm.bias", {32}}});
  if (!tied) out.push_back({"head.weight", {65, 32}});
  return out;
}

TEST(Builder, TinyGptParamNamesShapesAndCounts) {
  for (bool tied : {true, false}) {
    const auto spec = tiny_gpt(tied);
    auto layers = build_blocks(spec, 0, spec.blocks.size(), on_host());
    ASSERT_EQ(layers.size(), spec.blocks.size());
    EXPECT_EQ(layers[0]->kind(), "embedding");
    EXPECT_EQ(layers[1]->kind(), "transformer_block");
    EXPECT_EQ(layers[3]->kind(), "layernorm");
    EXPECT_EQ(layers[4]->kind(), "lm_head");
    EXPECT_EQ(layers[5]->kind(), "softmax_cross_entropy");
    const auto params = collect_params(layers);
    const auto expected = expected_gpt_params(tied);
    ASSERT_EQ(params.size(), expected.size()) << "tied " << tied;
    std::int64_t elements = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i]->name, expected[i].first);
      EXPECT_EQ(params[i]->value.shape(), expected[i].second) << params[i]->name;
      EXPECT_EQ(params[i]->grad.shape(), expected[i].second);
      EXPECT_EQ(params[i]->value.category(), MemoryCategory::kParameters);
      EXPECT_EQ(params[i]->grad.category(), MemoryCategory::kGradients);
      for (float g : params[i]->grad.to_floats()) ASSERT_EQ(g, 0.0f);
      const bool decays = params[i]->name.ends_with(".weight") && params[i]->name.find("ln") == std::string::npos &&
                          params[i]->name.find("norm") == std::string::npos;
      EXPECT_EQ(params[i]->weight_decay, decays || params[i]->name == "embed.token") << params[i]->name;
      elements += params[i]->value.numel();
    }
    EXPECT_EQ(elements, partition::unique_param_count(spec, 0, spec.blocks.size()));
    EXPECT_EQ(elements, tied ? 28064 : 28064 + 65 * 32);
  }
}

TEST(Builder, GptInitFollowsGpt2) {
  const auto spec = tiny_gpt();
  auto layers = build_blocks(spec, 0, spec.blocks.size(), seeded(42));
  std::map<std::string, std::shared_ptr<Param>> by_name;
  for (auto& p : collect_params(layers)) by_name[p->name] = p;
  auto stddev = [](const Param& p) {
    double s = 0;
    for (float v : p.value.to_floats()) s += static_cast<double>(v) * v;
    return std::sqrt(s / static_cast<double>(p.value.numel()));
  };
  EXPECT_NEAR(stddev(*by_name["blocks.0.attn.qkv.weight"]), 0.02, 0.002);
  EXPECT_NEAR(stddev(*by_name["blocks.1.mlp.fc.weight"]), 0.02, 0.002);
  EXPECT_NEAR(stddev(*by_name["embed.token"]), 0.02, 0.002);
  EXPECT_NEAR(stddev(*by_name["blocks.0.attn.proj.weight"]), 0.02 / std::sqrt(4.0), 0.0015);
  EXPECT_NEAR(stddev(*by_name["blocks.1.mlp.proj.weight"]), 0.02 / std::sqrt(4.0), 0.0015);
  for (float v : by_name["blocks.0.attn.qkv.bias"]->value.to_floats()) ASSERT_EQ(v, 0.0f);
  for (float v : by_name["final_norm.weight"]->value.to_floats()) ASSERT_EQ(v, 1.0f);
  for (float v : by_name["blocks.1.ln2.bias"]->value.to_floats()) ASSERT_EQ(v, 0.0f);

  // Same seed, same values; another seed, other values.
  auto again = collect_params(build_blocks(spec, 0, spec.blocks.size(), seeded(42)));
  auto other = collect_params(build_blocks(spec, 0, spec.blocks.size(), seeded(43)));
  EXPECT_EQ(again[4]->value.to_floats(), by_name[again[4]->name]->value.to_floats());
  EXPECT_NE(other[4]->value.to_floats(), by_name[other[4]->name]->value.to_floats());
}

TEST(Builder, TiedHeadSharesWithinARangeAndCopiesAcrossRanges) {
  const auto spec = tiny_gpt(true);
  auto whole = build_blocks(spec, 0, spec.blocks.size(), on_host());
  auto* embed = dynamic_cast<Embedding*>(whole[0].get());
  auto* head = dynamic_cast<LmHead*>(whole[4].get());
  ASSERT_TRUE(embed && head);
  EXPECT_TRUE(head->tied());
  EXPECT_EQ(head->weight().get(), embed->token_table().get());

  // Pipeline split: the embedding on one stage, the head on another.
  auto first = build_blocks(spec, 0, 2, on_host());
  auto last = build_blocks(spec, 2, spec.blocks.size(), on_host());
  auto* embed_a = dynamic_cast<Embedding*>(first[0].get());
  auto* head_b = dynamic_cast<LmHead*>(last[2].get());
  ASSERT_TRUE(embed_a && head_b);
  EXPECT_NE(head_b->weight().get(), embed_a->token_table().get());
  EXPECT_EQ(head_b->weight()->name, "embed.token");
  EXPECT_EQ(head_b->weight()->value.to_floats(), embed_a->token_table()->value.to_floats());
  EXPECT_EQ(head_b->weight()->value.to_floats(), embed->token_table()->value.to_floats());

  // The union of the stages' params, by name, equals the single-range model's.
  std::map<std::string, std::vector<float>> single, split;
  for (auto& p : collect_params(whole)) single[p->name] = p->value.to_floats();
  for (auto* part : {&first, &last}) {
    for (auto& p : collect_params(*part)) split[p->name] = p->value.to_floats();
  }
  EXPECT_EQ(single, split);
  EXPECT_EQ(collect_params(last).size(), 12u + 2 + 1);  // block 1, final norm, the table copy
}

TEST(Builder, RejectsBadRanges) {
  const auto spec = tiny_gpt();
  EXPECT_THROW(build_blocks(spec, 2, 2, on_host()), Error);
  EXPECT_THROW(build_blocks(spec, 0, 7, on_host()), Error);
}

// Runs the whole layer list forward (loss last) and backward; returns the loss.
float run_model(std::vector<LayerPtr>& layers, const Tensor& input, const Tensor& targets, Context& ctx,
                bool backward) {
  std::vector<Stash> stashes(layers.size());
  Tensor x = input;
  for (std::size_t i = 0; i < layers.size(); ++i) x = forward_block(*layers[i], x, targets, stashes[i], ctx);
  const float loss = x.data<float>()[0];
  if (backward) {
    Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{});
    for (std::size_t i = layers.size(); i-- > 0;) dy = layers[i]->backward(dy, stashes[i], ctx);
  }
  return loss;
}

TEST(Builder, GptInitialLossIsLogVocab) {
  const auto spec = tiny_gpt();
  auto layers = build_blocks(spec, 0, spec.blocks.size(), on_host());
  Context ctx;
  const float loss = run_model(layers, random_ids({4, 16}, 65, 1), random_ids({4, 16}, 65, 2), ctx, false);
  EXPECT_NEAR(loss, std::log(65.0), 0.05);
}

// Whole-model gradients by finite differences on a few elements of every parameter: checks the
// composition order, the residual paths and the tied table receiving both the head's and the
// embedding's gradient.
void check_model_gradients(const partition::ModelSpec& spec, const Tensor& input, const Tensor& targets,
                           float scale) {
  auto layers = build_blocks(spec, 0, spec.blocks.size(), seeded(9));
  std::uint64_t s = 300;
  for (auto& p : collect_params(layers)) {
    const bool norm_gain = p->name.find("ln") != std::string::npos || p->name.find("norm") != std::string::npos;
    if (norm_gain && p->name.ends_with(".weight")) {
      testing::randomize(*p, ++s, 1.0f, 0.2f);
    } else {
      testing::randomize(*p, ++s, 0.0f, scale);
    }
  }
  Context ctx;
  run_model(layers, input, targets, ctx, true);
  for (auto& p : collect_params(layers)) {
    const auto idx = testing::sample_indices(p->value.numel(), 6, ++s);
    std::vector<double> analytic, numeric;
    for (auto i : idx) analytic.push_back(p->grad.data<float>()[i]);
    numeric = testing::numeric_grad(
        p->value.data<float>(), idx, [&] { return static_cast<double>(run_model(layers, input, targets, ctx, false)); },
        1e-2f);
    double norm = 0;
    for (double a : analytic) norm += a * a;
    EXPECT_GT(norm, 0.0) << p->name;
    EXPECT_LT(testing::rel_l2(analytic, numeric), 2e-2) << p->name;
  }
}

TEST(Builder, WholeGptGradients) {
  partition::GptConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.seq_len = 5;
  check_model_gradients(partition::make_gpt_spec(c), random_ids({2, 5}, 11, 3), random_ids({2, 5}, 11, 4), 0.3f);
}

TEST(Builder, WholeMlpAndCnnGradients) {
  partition::MlpConfig m;
  m.in_features = 6;
  m.hidden = {7, 5};
  m.num_classes = 4;
  check_model_gradients(partition::make_mlp_spec(m), random_tensor({5, 6}, 5), random_ids({5}, 4, 6), 0.5f);

  partition::CnnConfig c;
  c.in_channels = 2;
  c.height = 6;
  c.width = 6;
  c.channels = {3};
  c.num_classes = 3;
  check_model_gradients(partition::make_cnn_spec(c), random_tensor({2, 2, 6, 6}, 7), random_ids({2}, 3, 8), 0.5f);
}

}  // namespace
}  // namespace cleave::layers::builder_test
