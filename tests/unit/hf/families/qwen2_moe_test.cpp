// Qwen2MoeForCausalLM through the HF table (engine/hf/families/qwen2_moe.cpp): a fixture written by the test (as
// transformers 5 writes it: qkv_bias, norm_topk_prob false, a shared expert twice the experts' width) imports with
// its q/k/v biases as model.qkv_bias, its shared expert as n_shared_experts 2 with shared_expert_gate and the
// experts stacked row for row; export writes the same class and every tensor back bit for bit; a gated shared
// expert chooses the class on export; and what Cleave cannot represent is one error naming the key.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/core/error.hpp"
#include "engine/hf/hf_config.hpp"
#include "engine/hf/hf_export.hpp"
#include "engine/hf/hf_import.hpp"
#include "support/error_of.hpp"
#include "unit/hf/hf_fixture.hpp"

namespace cleave::hf::qwen2_moe_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::HfFixture;

constexpr std::int64_t kV = 50, kD = 16, kF = 12, kS = 24, kE = 4, kQ = 16, kKv = 8;

HfFixture qwen2_moe_fixture(unsigned seed = 29) {
  std::mt19937 rng(seed);
  HfFixture out;
  out.config = {{"architectures", {"Qwen2MoeForCausalLM"}}, {"model_type", "qwen2_moe"}, {"vocab_size", kV},
                {"hidden_size", kD}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"intermediate_size", 40}, {"moe_intermediate_size", kF},
                {"shared_expert_intermediate_size", kS}, {"num_experts", kE}, {"num_experts_per_tok", 2},
                {"norm_topk_prob", false}, {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array()},
                {"qkv_bias", true}, {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-6},
                {"use_sliding_window", false}, {"sliding_window", 0}, {"max_window_layers", 28},
                {"layer_types", {"full_attention", "full_attention"}},
                {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}}, {"hidden_act", "silu"},
                {"router_aux_loss_coef", 0.001}, {"output_router_logits", false}, {"tie_word_embeddings", false}};
  auto& w = out.tensors;
  w["model.embed_tokens.weight"] = testing::random_tensor({kV, kD}, rng);
  for (int i = 0; i < 2; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    w[p + "input_layernorm.weight"] = testing::random_tensor({kD}, rng);
    w[p + "self_attn.q_proj.weight"] = testing::random_tensor({kQ, kD}, rng);
    w[p + "self_attn.q_proj.bias"] = testing::random_tensor({kQ}, rng);
    w[p + "self_attn.k_proj.weight"] = testing::random_tensor({kKv, kD}, rng);
    w[p + "self_attn.k_proj.bias"] = testing::random_tensor({kKv}, rng);
    w[p + "self_attn.v_proj.weight"] = testing::random_tensor({kKv, kD}, rng);
    w[p + "self_attn.v_proj.bias"] = testing::random_tensor({kKv}, rng);
    w[p + "self_attn.o_proj.weight"] = testing::random_tensor({kD, kQ}, rng);
    w[p + "post_attention_layernorm.weight"] = testing::random_tensor({kD}, rng);
    w[p + "mlp.gate.weight"] = testing::random_tensor({kE, kD}, rng);
    for (int j = 0; j < kE; ++j) {
      const std::string e = fmt::format("{}mlp.experts.{}.", p, j);
      w[e + "gate_proj.weight"] = testing::random_tensor({kF, kD}, rng);
      w[e + "up_proj.weight"] = testing::random_tensor({kF, kD}, rng);
      w[e + "down_proj.weight"] = testing::random_tensor({kD, kF}, rng);
    }
    w[p + "mlp.shared_expert.gate_proj.weight"] = testing::random_tensor({kS, kD}, rng);
    w[p + "mlp.shared_expert.up_proj.weight"] = testing::random_tensor({kS, kD}, rng);
    w[p + "mlp.shared_expert.down_proj.weight"] = testing::random_tensor({kD, kS}, rng);
    w[p + "mlp.shared_expert_gate.weight"] = testing::random_tensor({1, kD}, rng);
  }
  w["model.norm.weight"] = testing::random_tensor({kD}, rng);
  w["lm_head.weight"] = testing::random_tensor({kV, kD}, rng);
  return out;
}

using cleave::testing::error_of;

TEST(HfQwen2Moe, ImportsBiasesSharedExpertAndGateAndExportGivesEveryTensorBack) {
  const HfFixture f = qwen2_moe_fixture();
  const fs::path dir = testing::fresh_dir("qwen2_moe");
  f.write(dir, 2);
  const HfCheckpoint ck = read_hf_checkpoint(dir.string());
  const json& m = ck.config.model;
  EXPECT_EQ(m.at("type"), "moe");
  EXPECT_EQ(m.at("qkv_bias"), true);
  EXPECT_EQ(m.at("qk_norm"), false);
  EXPECT_EQ(m.at("ffn_hidden_size"), kF);
  EXPECT_EQ(m.at("n_experts"), kE);
  EXPECT_EQ(m.at("n_shared_experts"), kS / kF);
  EXPECT_EQ(m.at("shared_expert_gate"), true);
  EXPECT_EQ(m.at("normalize_top_k"), false);
  EXPECT_EQ(ck.tensors.at("blocks.1.attn.k.bias"), f.tensors.at("model.layers.1.self_attn.k_proj.bias").values);
  EXPECT_EQ(ck.tensors.at("blocks.0.moe.shared.down.weight"),
            f.tensors.at("model.layers.0.mlp.shared_expert.down_proj.weight").values);
  EXPECT_EQ(ck.tensors.at("blocks.1.moe.shared_gate.weight"),
            f.tensors.at("model.layers.1.mlp.shared_expert_gate.weight").values);
  const std::vector<float>& down = ck.tensors.at("blocks.1.moe.experts.down.weight");
  for (int j = 0; j < kE; ++j) {
    const auto& one = f.tensors.at(fmt::format("model.layers.1.mlp.experts.{}.down_proj.weight", j)).values;
    EXPECT_TRUE(std::equal(one.begin(), one.end(), down.begin() + j * kF * kD)) << "down row " << j;
  }
  const fs::path out = testing::fresh_dir("qwen2_moe_out");
  write_hf_checkpoint(out.string(), m, [&](const std::string& n) { return ck.tensors.at(n); },
                      {.bf16 = false, .max_shard_bytes = 4096, .source = {}});
  const json config = json::parse(std::ifstream(out / "config.json"));
  EXPECT_EQ(config.at("architectures").at(0), "Qwen2MoeForCausalLM");
  EXPECT_EQ(config.at("shared_expert_intermediate_size"), kS);
  EXPECT_EQ(config.at("moe_intermediate_size"), kF);
  EXPECT_EQ(config.at("qkv_bias"), true);
  EXPECT_EQ(config.at("norm_topk_prob"), false);
  const HfCheckpoint back = read_hf_checkpoint(out.string());
  EXPECT_EQ(back.config.model, m);
  EXPECT_EQ(back.tensors, ck.tensors);  // bit for bit
  fs::remove_all(dir);
  fs::remove_all(out);
}

TEST(HfQwen2Moe, TheGatedSharedExpertChoosesTheClassOnExport) {
  json moe = read_hf_config(qwen2_moe_fixture().config, "config.json").model;
  EXPECT_EQ(hf_config_json(moe, "float32").at("architectures").at(0), "Qwen2MoeForCausalLM");
  moe["qkv_bias"] = false;  // transformers 5's qkv_bias false
  EXPECT_EQ(hf_config_json(moe, "float32").at("qkv_bias"), false);
  const auto has = [](const std::string& text, const std::string& want) {
    EXPECT_NE(text.find(want), std::string::npos) << text;
  };
  json ungated = moe;
  ungated["shared_expert_gate"] = false;
  has(error_of([&] { hf_config_json(ungated, "float32"); }), "model.n_shared_experts is 2 with shared_expert_gate false");
  json normed = moe;
  normed["qk_norm"] = true;
  has(error_of([&] { hf_config_json(normed, "float32"); }), "model.n_shared_experts is 2 with qk_norm true");
  json no_shared = moe;
  no_shared["n_shared_experts"] = 0;
  no_shared["shared_expert_gate"] = false;
  no_shared["qkv_bias"] = true;
  no_shared["normalize_top_k"] = true;
  has(error_of([&] { hf_config_json(no_shared, "float32"); }), "model.qkv_bias is true without shared experts");
  no_shared["qkv_bias"] = false;
  EXPECT_EQ(hf_config_json(no_shared, "float32").at("architectures").at(0), "MixtralForCausalLM");
}

TEST(HfQwen2Moe, WhatCleaveCannotRepresentIsOneErrorNamingIt) {
  const auto import_error = [](const char* key, json value) {
    HfFixture f = qwen2_moe_fixture();
    f.config[key] = std::move(value);
    return error_of([&] { read_hf_config(f.config, "config.json"); });
  };
  const auto has = [](const std::string& text, const std::string& want) {
    EXPECT_NE(text.find(want), std::string::npos) << text;
  };
  has(import_error("shared_expert_intermediate_size", 30),
      "shared_expert_intermediate_size 30 is not a positive multiple of moe_intermediate_size 12");
  has(import_error("shared_expert_intermediate_size", 0),
      "shared_expert_intermediate_size must be a positive integer, got 0");
  has(import_error("mlp_only_layers", json::array({1})), "mlp_only_layers is [1]");
  has(import_error("decoder_sparse_step", 2), "decoder_sparse_step is 2");
  has(import_error("use_sliding_window", true), "use_sliding_window is true");
  has(import_error("num_experts_per_tok", 5), "num_experts_per_tok 5 is larger than num_experts 4");
  has(import_error("attention_bias", true), "key \"attention_bias\"");  // not a Qwen2-MoE key: refused by name
  // transformers 4's Qwen2-MoE has no qkv_bias key: the biases are always there.
  HfFixture old = qwen2_moe_fixture();
  old.config.erase("qkv_bias");
  EXPECT_EQ(read_hf_config(old.config, "config.json").model.at("qkv_bias"), true);
}

}  // namespace
}  // namespace cleave::hf::qwen2_moe_test
