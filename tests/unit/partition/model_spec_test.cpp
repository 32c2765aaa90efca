// ModelSpec builders: block order, names, per-sample boundary shapes, and errors naming the config key.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"
#include "partition/tp_rules.hpp"
#include "support/error_of.hpp"

namespace cleave::partition::model_spec_test {
namespace {

using cleave::testing::error_of;

// The config key a builder's error names (the config layer reports it under the key's origin).
std::string key_of(auto&& fn) {
  try {
    fn();
  } catch (const ConfigKeyError& e) {
    return e.key();
  }
  return "(no ConfigKeyError)";
}

void expect_chained(const ModelSpec& spec) {
  for (std::size_t i = 1; i < spec.blocks.size(); ++i) {
    EXPECT_EQ(spec.blocks[i - 1].output, spec.blocks[i].input) << "between blocks " << i - 1 << " and " << i;
  }
}

TEST(ModelSpec, GptBlocksShapesAndNames) {
  GptConfig c;
  c.vocab_size = 65;
  c.d_model = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.seq_len = 16;
  const ModelSpec spec = make_gpt_spec(c);
  ASSERT_EQ(spec.blocks.size(), 7u);
  EXPECT_EQ(spec.type, ModelType::kGpt);
  EXPECT_EQ(spec.gpt.d_ff, 128);  // 0 resolves to 4 * d_model
  EXPECT_EQ(spec.sample_input(), Shape({16}));
  EXPECT_EQ(spec.input_dtype(), DType::kI32);
  EXPECT_EQ(spec.items_per_sample(), 16);

  const auto& e = spec.blocks[0];
  EXPECT_EQ(e.kind, BlockKind::kEmbedding);
  EXPECT_EQ(e.name, "embed");
  EXPECT_EQ(e.output, Shape({16, 32}));
  EXPECT_EQ(e.vocab_size, 65);
  EXPECT_EQ(e.seq_len, 16);
  EXPECT_EQ(e.out_features, 32);
  for (int i = 0; i < 3; ++i) {
    const auto& b = spec.blocks[1 + i];
    EXPECT_EQ(b.kind, BlockKind::kTransformerBlock);
    EXPECT_EQ(b.name, "blocks." + std::to_string(i));
    EXPECT_EQ(b.input, Shape({16, 32}));
    EXPECT_EQ(b.output, Shape({16, 32}));
    EXPECT_EQ(b.n_heads, 4);
    EXPECT_EQ(b.d_ff, 128);
    EXPECT_EQ(b.input_dtype, DType::kF32);
  }
  EXPECT_EQ(spec.blocks[4].kind, BlockKind::kLayerNorm);
  EXPECT_EQ(spec.blocks[4].name, "final_norm");
  const auto& head = spec.blocks[5];
  EXPECT_EQ(head.kind, BlockKind::kLmHead);
  EXPECT_EQ(head.name, "head");
  EXPECT_EQ(head.output, Shape({16, 65}));
  EXPECT_TRUE(head.tied);
  const auto& loss = spec.blocks[6];
  EXPECT_EQ(loss.kind, BlockKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(loss.name, "loss");
  EXPECT_EQ(loss.output.rank(), 0);
  EXPECT_EQ(loss.output.numel(), 1);
  expect_chained(spec);

  c.tie_embeddings = false;
  c.d_ff = 48;
  const ModelSpec untied = make_gpt_spec(c);
  EXPECT_FALSE(untied.blocks[5].tied);
  EXPECT_EQ(untied.blocks[1].d_ff, 48);
}

// Ties are described by the spec (the trainer, data parallel and the memory plan read them from here instead
// of matching a hard-coded name): a tied GPT names its embedding's token table, untied GPTs and other models
// name nothing.
TEST(ModelSpec, TiedParametersAreDescribedByTheSpec) {
  GptConfig c;
  EXPECT_EQ(make_gpt_spec(c).tied_parameters, std::vector<std::string>{"embed.token"});
  EXPECT_EQ(make_gpt_spec(c).throughput_unit(), "tok");
  c.tie_embeddings = false;
  EXPECT_TRUE(make_gpt_spec(c).tied_parameters.empty());
  EXPECT_TRUE(make_mlp_spec(MlpConfig{}).tied_parameters.empty());
  EXPECT_EQ(make_mlp_spec(MlpConfig{}).throughput_unit(), "samples");
}

TEST(ModelSpec, GptErrorsNameKeyAndNumbers) {
  GptConfig c;
  c.d_model = 100;
  c.n_heads = 3;
  EXPECT_EQ(error_of([&] { make_gpt_spec(c); }).find("model.d_model: 100 is not divisible by model.n_heads 3"), 0u);
  EXPECT_EQ(key_of([&] { make_gpt_spec(c); }), "model.d_model");
  c = GptConfig{};
  c.vocab_size = 0;
  EXPECT_NE(error_of([&] { make_gpt_spec(c); }).find("model.vocab_size: must be > 0, got 0"), std::string::npos);
  c = GptConfig{};
  c.seq_len = -2;
  EXPECT_NE(error_of([&] { make_gpt_spec(c); }).find("model.seq_len: must be > 0, got -2"), std::string::npos);
  c = GptConfig{};
  c.d_ff = -1;
  EXPECT_NE(error_of([&] { make_gpt_spec(c); }).find("model.d_ff"), std::string::npos);
}

TEST(ModelSpec, MlpBlocksFollowSequentialNumbering) {
  MlpConfig c;
  c.in_features = 20;
  c.hidden = {30, 40};
  c.num_classes = 7;
  c.activation = Activation::kGelu;
  const ModelSpec spec = make_mlp_spec(c);
  ASSERT_EQ(spec.blocks.size(), 6u);
  const BlockKind kinds[] = {BlockKind::kLinear, BlockKind::kGelu, BlockKind::kLinear,
                             BlockKind::kGelu,   BlockKind::kLinear, BlockKind::kSoftmaxCrossEntropy};
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(spec.blocks[i].kind, kinds[i]) << i;
  EXPECT_EQ(spec.blocks[0].name, "layers.0");
  EXPECT_EQ(spec.blocks[2].name, "layers.2");
  EXPECT_EQ(spec.blocks[4].name, "layers.4");
  EXPECT_EQ(spec.blocks[5].name, "loss");
  EXPECT_EQ(spec.blocks[0].input, Shape({20}));
  EXPECT_EQ(spec.blocks[2].in_features, 30);
  EXPECT_EQ(spec.blocks[2].out_features, 40);
  EXPECT_EQ(spec.blocks[4].output, Shape({7}));
  EXPECT_EQ(spec.items_per_sample(), 1);
  expect_chained(spec);

  c.hidden = {};
  EXPECT_EQ(make_mlp_spec(c).blocks.size(), 2u);  // a linear classifier is allowed
  c.activation = Activation::kRelu;  // an unknown activation is refused by the config reader (enum name table)
  c.hidden = {8, 0};
  EXPECT_NE(error_of([&] { make_mlp_spec(c); }).find("model.hidden[1]: must be > 0, got 0"), std::string::npos);
}

TEST(ModelSpec, CnnShapesThroughConvPoolFlatten) {
  CnnConfig c;
  c.in_channels = 3;
  c.height = 9;
  c.width = 12;
  c.channels = {5, 6};
  c.kernel = 3;
  c.pool = 2;
  c.num_classes = 4;
  const ModelSpec spec = make_cnn_spec(c);
  ASSERT_EQ(spec.blocks.size(), 3u * 2 + 3);
  EXPECT_EQ(spec.blocks[0].kind, BlockKind::kConv2d);
  EXPECT_EQ(spec.blocks[0].input, Shape({3, 9, 12}));
  EXPECT_EQ(spec.blocks[0].output, Shape({5, 9, 12}));
  EXPECT_EQ(spec.blocks[0].kernel, 3);
  EXPECT_EQ(spec.blocks[1].kind, BlockKind::kRelu);
  EXPECT_EQ(spec.blocks[2].kind, BlockKind::kMaxPool);
  EXPECT_EQ(spec.blocks[2].output, Shape({5, 4, 6}));
  EXPECT_EQ(spec.blocks[3].output, Shape({6, 4, 6}));
  EXPECT_EQ(spec.blocks[5].output, Shape({6, 2, 3}));
  EXPECT_EQ(spec.blocks[6].kind, BlockKind::kFlatten);
  EXPECT_EQ(spec.blocks[6].output, Shape({36}));
  EXPECT_EQ(spec.blocks[7].kind, BlockKind::kLinear);
  EXPECT_EQ(spec.blocks[7].name, "layers.7");
  EXPECT_EQ(spec.blocks[7].in_features, 36);
  EXPECT_EQ(spec.blocks[8].kind, BlockKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(spec.sample_input(), Shape({3, 9, 12}));
  EXPECT_EQ(spec.input_dtype(), DType::kF32);
  expect_chained(spec);
}

TEST(ModelSpec, CnnErrors) {
  CnnConfig c;
  c.height = 8;
  c.width = 8;
  c.channels = {4, 4, 4, 4};
  c.pool = 2;
  const std::string msg = error_of([&] { make_cnn_spec(c); });
  EXPECT_NE(msg.find("model.channels: 4 conv stages with model.pool 2 shrink model.height × model.width 8×8 to "
                     "nothing at stage 4"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("8×8 -> 4×4 -> 2×2 -> 1×1 -> 0×0"), std::string::npos) << msg;
  EXPECT_EQ(key_of([&] { make_cnn_spec(c); }), "model.channels");
  c = CnnConfig{};
  c.kernel = 4;
  EXPECT_NE(error_of([&] { make_cnn_spec(c); }).find("model.kernel: 4 must be odd"), std::string::npos);
  c = CnnConfig{};
  c.channels = {};
  EXPECT_NE(error_of([&] { make_cnn_spec(c); }).find("model.channels"), std::string::npos);
  c = CnnConfig{};
  c.in_channels = 0;
  EXPECT_NE(error_of([&] { make_cnn_spec(c); }).find("model.in_channels: must be > 0"), std::string::npos);
}

TEST(ModelSpec, LlamaBlocksDefaultsAndNames) {
  LlamaConfig c;  // d_model 64, 4 heads, n_kv_heads and ffn_hidden_size not given
  const ModelSpec spec = make_llama_spec(c);
  expect_chained(spec);
  EXPECT_EQ(spec.llama.n_kv_heads, 4);
  EXPECT_EQ(spec.llama.ffn_hidden_size, 192);
  EXPECT_EQ(llama_ffn_hidden_size(4096), 10944);  // 10922 rounded up to 64 (Llama 2 7B rounds to 256: 11008)
  ASSERT_EQ(spec.blocks.size(), 2u + 4u);
  EXPECT_EQ(spec.blocks[0].kind, BlockKind::kEmbedding);
  EXPECT_EQ(spec.blocks[0].seq_len, 0);  // no position table
  EXPECT_EQ(spec.blocks[1].kind, BlockKind::kLlamaBlock);
  EXPECT_EQ(spec.blocks[1].name, "blocks.0");
  EXPECT_EQ(spec.blocks[3].kind, BlockKind::kRmsNorm);
  EXPECT_EQ(spec.blocks[3].name, "final_norm");
  EXPECT_FALSE(spec.blocks[4].tied);
  EXPECT_TRUE(spec.tied_parameters.empty());
  EXPECT_EQ(spec.throughput_unit(), "tok");
  EXPECT_EQ(spec.items_per_sample(), 32);
  EXPECT_EQ(block_kind_name(BlockKind::kLlamaBlock), "llama_block");
  EXPECT_EQ(block_kind_name(BlockKind::kRmsNorm), "rmsnorm");
}

TEST(ModelSpec, LlamaErrorsNameKeyNumbersAndFix) {
  LlamaConfig c;
  c.n_heads = 4;
  c.n_kv_heads = 3;
  EXPECT_EQ(error_of([&] { make_llama_spec(c); }), "model.n_kv_heads: 3 does not divide model.n_heads 4: each "
            "key/value head serves a whole group of query heads; use a divisor of n_heads");
  c = LlamaConfig{};
  c.d_model = 36;
  c.n_heads = 4;  // head size 9
  EXPECT_EQ(key_of([&] { make_llama_spec(c); }), "model.d_model");
  EXPECT_NE(error_of([&] { make_llama_spec(c); }).find("head size 9, which must be even"), std::string::npos);
  c = LlamaConfig{};
  c.norm_eps = 0;
  EXPECT_EQ(key_of([&] { make_llama_spec(c); }), "model.norm_eps");
  c = LlamaConfig{};
  c.rope_theta = -1;
  EXPECT_EQ(key_of([&] { make_llama_spec(c); }), "model.rope_theta");

  // Tensor parallelism: every tp rank needs whole query and key/value heads and an equal share of the SwiGLU.
  c = LlamaConfig{};
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn_hidden_size = 96;
  EXPECT_EQ(error_of([&] { check_tensor_parallel(make_llama_spec(c), 4); }),
            "model.n_kv_heads: 2 is not divisible by parallel.tensor_model_parallel_size 4: each tp rank needs whole "
            "key/value heads; use tp in {1, 2} (divisors of n_heads, n_kv_heads and ffn_hidden_size)");
  c.n_kv_heads = 8;
  c.ffn_hidden_size = 100;
  EXPECT_EQ(key_of([&] { check_tensor_parallel(make_llama_spec(c), 8); }), "model.ffn_hidden_size");
  c.ffn_hidden_size = 96;
  EXPECT_EQ(error_of([&] { check_tensor_parallel(make_llama_spec(c), 8); }), "(no error)");
}

// issue 35: the context a model serves, Mistral's window and Qwen2's biases reach the llama block.
TEST(ModelSpec, LlamaMaxSeqLenWindowAndBiases) {
  LlamaConfig c;
  c.seq_len = 16;
  EXPECT_EQ(make_llama_spec(c).llama.max_seq_len, 16);  // absent: seq_len
  c.max_seq_len = 8;
  EXPECT_EQ(key_of([&] { make_llama_spec(c); }), "model.seq_len");
  EXPECT_NE(error_of([&] { make_llama_spec(c); }).find("16 is above model.max_seq_len 8"), std::string::npos);
  c.max_seq_len = 64;
  c.sliding_window = 4;
  const ModelSpec plain = make_llama_spec(c);
  EXPECT_EQ(plain.blocks[1].attention_window, 4);
  // Qwen2: the window from a later block on (blocks[0] is the embedding).
  c.sliding_window_from_layer = 1;
  const ModelSpec later = make_llama_spec(c);
  EXPECT_EQ(later.blocks[1].attention_window, 0);
  EXPECT_EQ(later.blocks[2].attention_window, 4);
  c.sliding_window_from_layer = 2;  // n_layers 2
  EXPECT_EQ(key_of([&] { make_llama_spec(c); }), "model.sliding_window_from_layer");
  c.sliding_window = 0;
  c.sliding_window_from_layer = 1;
  EXPECT_NE(error_of([&] { make_llama_spec(c); }).find("model.sliding_window is 0"), std::string::npos);
  c.sliding_window = 4;
  c.sliding_window_from_layer = 0;
  c.qkv_bias = true;
  const ModelSpec biased = make_llama_spec(c);
  EXPECT_TRUE(biased.blocks[1].qkv_bias);
  // q, k and v biases: Hq·hd + 2·Hkv·hd parameters more per block.
  const std::int64_t hd = c.d_model / c.n_heads, kv = biased.llama.n_kv_heads;
  EXPECT_EQ(block_cost(biased.blocks[1]).param_count - block_cost(plain.blocks[1]).param_count,
            c.n_heads * hd + 2 * kv * hd);
}

TEST(ModelSpec, BlockKindNames) {
  EXPECT_EQ(block_kind_name(BlockKind::kTransformerBlock), "transformer_block");
  EXPECT_EQ(block_kind_name(BlockKind::kSoftmaxCrossEntropy), "softmax_cross_entropy");
  EXPECT_EQ(block_kind_name(BlockKind::kMaxPool), "maxpool");
}

}  // namespace
}  // namespace cleave::partition::model_spec_test
