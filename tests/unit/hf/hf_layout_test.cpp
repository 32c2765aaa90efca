// The Hugging Face <-> Cleave tensor table (engine/hf/hf_layout.hpp) against Cleave's own model: every
// parameter a built GPT holds appears exactly once on the Cleave side with its shape (tied and untied), the HF
// side has transformers' names and shapes, and the transforms move each element where the table says and back
// bit for bit. The same for Llama (grouped-query k/v, tied and untied), whose names are also spelled out.
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "engine/hf/hf_layout.hpp"
#include "layers/models/builder.hpp"
#include "partition/model_spec.hpp"

namespace cleave::hf::hf_layout_test {
namespace {

// Parameters on host memory: the test runs without a run's memory cap.
layers::BuildOptions on_host() { return layers::BuildOptions{cpu_allocator()}; }

std::map<std::string, std::vector<std::int64_t>> cleave_side(const std::vector<TensorMap>& table) {
  std::map<std::string, std::vector<std::int64_t>> out;
  for (const TensorMap& m : table) EXPECT_TRUE(out.emplace(m.cleave_name, m.cleave_shape).second) << m.cleave_name;
  return out;
}

// Every parameter the builder makes for `spec` on one rank, by name, with its shape.
std::map<std::string, std::vector<std::int64_t>> built_params(const partition::ModelSpec& spec) {
  const auto layers = layers::build_blocks(spec, 0, spec.blocks.size(), on_host());
  std::map<std::string, std::vector<std::int64_t>> built;
  for (const auto& p : layers::collect_params(layers)) {
    built[p->name] = {p->value.shape().dims().begin(), p->value.shape().dims().end()};
  }
  return built;
}

ModelDims gpt_dims(bool tied) {
  return {Architecture::kGpt2, /*vocab*/ 263, /*d*/ 24, /*layers*/ 3, /*heads*/ 4, /*kv*/ 4,
          /*ffn*/ 40,          /*seq*/ 11,    tied};
}

TEST(HfLayout, GptTableIsExactlyTheParametersCleaveBuilds) {
  for (bool tied : {true, false}) {
    const ModelDims d = gpt_dims(tied);
    partition::GptConfig config;
    config.vocab_size = d.vocab_size;
    config.d_model = d.d_model;
    config.n_layers = d.n_layers;
    config.n_heads = d.n_heads;
    config.seq_len = d.seq_len;
    config.d_ff = d.ffn;
    config.tie_embeddings = tied;
    const partition::ModelSpec spec = partition::make_gpt_spec(config);
    const std::vector<TensorMap> table = tensor_map(d);
    EXPECT_EQ(cleave_side(table), built_params(spec)) << (tied ? "tied" : "untied");
    EXPECT_EQ(table.size(), 2 + 12 * 3 + 2 + (tied ? 0 : 1));
  }
}

TEST(HfLayout, Gpt2NamesAndConv1dShapes) {
  std::map<std::string, const TensorMap*> by_hf;
  const std::vector<TensorMap> table = tensor_map(gpt_dims(false));
  for (const TensorMap& m : table) by_hf[m.hf_name] = &m;
  const TensorMap& qkv = *by_hf.at("transformer.h.2.attn.c_attn.weight");
  EXPECT_EQ(qkv.cleave_name, "blocks.2.attn.qkv.weight");
  EXPECT_EQ(qkv.hf_shape, (std::vector<std::int64_t>{24, 72}));
  EXPECT_EQ(qkv.cleave_shape, (std::vector<std::int64_t>{72, 24}));
  EXPECT_EQ(qkv.transform, Transform::kTranspose);
  EXPECT_EQ(by_hf.at("transformer.h.0.mlp.c_fc.weight")->hf_shape, (std::vector<std::int64_t>{24, 40}));
  EXPECT_EQ(by_hf.at("transformer.h.0.mlp.c_proj.weight")->cleave_shape, (std::vector<std::int64_t>{24, 40}));
  EXPECT_EQ(by_hf.at("transformer.h.1.attn.c_attn.bias")->transform, Transform::kCopy);
  EXPECT_EQ(by_hf.at("transformer.wpe.weight")->cleave_name, "embed.position");
  EXPECT_EQ(by_hf.at("transformer.ln_f.bias")->cleave_name, "final_norm.bias");
  EXPECT_EQ(by_hf.at("lm_head.weight")->cleave_name, "head.weight");
  EXPECT_TRUE(is_hf_buffer(Architecture::kGpt2, "transformer.h.0.attn.bias"));
  EXPECT_TRUE(is_hf_buffer(Architecture::kGpt2, "h.3.attn.masked_bias"));
  EXPECT_FALSE(is_hf_buffer(Architecture::kGpt2, "transformer.h.0.attn.c_attn.bias"));
}

TEST(HfLayout, LlamaTableIsExactlyTheParametersCleaveBuilds) {
  for (bool tied : {false, true}) {
    const ModelDims d{Architecture::kLlama, 301, 48, 3, 6, 2, 72, 10, tied};
    partition::LlamaConfig config;
    config.vocab_size = d.vocab_size;
    config.d_model = d.d_model;
    config.n_layers = d.n_layers;
    config.n_heads = d.n_heads;
    config.n_kv_heads = d.n_kv_heads;
    config.seq_len = d.seq_len;
    config.ffn_hidden_size = d.ffn;
    config.tie_embeddings = tied;
    const partition::ModelSpec spec = partition::make_llama_spec(config);
    EXPECT_EQ(cleave_side(tensor_map(d)), built_params(spec)) << (tied ? "tied" : "untied");
  }
}

TEST(HfLayout, LlamaNamesAndGroupedQueryShapes) {
  const ModelDims d{Architecture::kLlama, 300, 32, 2, 8, 2, 56, 16, false};  // hd 4: q 32 rows, k/v 8
  const std::vector<TensorMap> table = tensor_map(d);
  EXPECT_EQ(table.size(), 1 + 9 * 2 + 1 + 1);
  std::map<std::string, const TensorMap*> by_cleave;
  for (const TensorMap& m : table) {
    by_cleave[m.cleave_name] = &m;
    EXPECT_EQ(m.transform, Transform::kCopy) << m.hf_name;  // nn.Linear on both sides, rotate_half RoPE on both
    EXPECT_EQ(m.hf_shape, m.cleave_shape) << m.hf_name;
  }
  using S = std::vector<std::int64_t>;
  EXPECT_EQ(by_cleave.at("embed.token")->hf_name, "model.embed_tokens.weight");
  EXPECT_EQ(by_cleave.at("blocks.1.attn_norm.weight")->hf_name, "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(by_cleave.at("blocks.1.attn.q.weight")->cleave_shape, (S{32, 32}));
  EXPECT_EQ(by_cleave.at("blocks.1.attn.k.weight")->cleave_shape, (S{8, 32}));
  EXPECT_EQ(by_cleave.at("blocks.1.attn.v.weight")->hf_name, "model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(by_cleave.at("blocks.1.attn.v.weight")->cleave_shape, (S{8, 32}));
  EXPECT_EQ(by_cleave.at("blocks.0.attn.o.weight")->cleave_shape, (S{32, 32}));
  EXPECT_EQ(by_cleave.at("blocks.0.mlp_norm.weight")->hf_name, "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(by_cleave.at("blocks.0.mlp.gate.weight")->cleave_shape, (S{56, 32}));
  EXPECT_EQ(by_cleave.at("blocks.0.mlp.up.weight")->hf_name, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(by_cleave.at("blocks.0.mlp.down.weight")->cleave_shape, (S{32, 56}));
  EXPECT_EQ(by_cleave.at("final_norm.weight")->hf_name, "model.norm.weight");
  EXPECT_EQ(by_cleave.at("head.weight")->hf_name, "lm_head.weight");
  ModelDims tied = d;
  tied.tied = true;
  EXPECT_EQ(cleave_side(tensor_map(tied)).count("head.weight"), 0u);
  EXPECT_TRUE(is_hf_buffer(Architecture::kLlama, "model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST(HfLayout, TransposeMovesEveryElementAndBack) {
  const TensorMap m = tensor_map(gpt_dims(true))[4];  // blocks.0.attn.qkv.weight: HF [24, 72]
  ASSERT_EQ(m.transform, Transform::kTranspose);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> hf(24 * 72);
  for (float& v : hf) v = normal(rng);
  const std::vector<float> ours = to_cleave(m, hf);
  for (int r = 0; r < 72; ++r) {
    for (int c = 0; c < 24; ++c) ASSERT_EQ(ours[r * 24 + c], hf[c * 72 + r]) << r << "," << c;
  }
  EXPECT_EQ(to_hf(m, ours), hf);
  EXPECT_NE(ours, hf);
}

}  // namespace
}  // namespace cleave::hf::hf_layout_test
