// Qwen3ForCausalLM and Qwen3MoeForCausalLM through the HF table (engine/hf/families/qwen3.cpp, qwen3_moe.cpp):
// fixtures written by the test import with their per-head q_norm / k_norm ([head_dim]) as model.qk_norm and the
// Qwen3-MoE experts (mlp.experts.{j}.{gate,up,down}_proj, moe_intermediate_size wide) stacked row for row; export
// writes the same class and every tensor back bit for bit; a model's q/k norms choose the class on export; and what
// Cleave does not compute (dense layers between the mixtures, attention biases) is one error naming the key.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/hf/hf_config.hpp"
#include "unit/hf/families/family_fixture.hpp"

namespace cleave::hf::qwen3_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::expect_contains;
using testing::HfFixture;

constexpr std::int64_t kV = 50, kD = 16, kF = 12, kE = 4, kQ = 16, kKv = 8, kHd = 4;

HfFixture qwen3_fixture(bool moe, unsigned seed = 23) {
  std::mt19937 rng(seed);
  HfFixture out;
  out.config = {{"architectures", {moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
                {"model_type", moe ? "qwen3_moe" : "qwen3"}, {"vocab_size", kV}, {"hidden_size", kD},
                {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", kHd},
                {"intermediate_size", moe ? 40 : kF}, {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-6},
                {"attention_bias", false}, {"use_sliding_window", false}, {"sliding_window", nullptr},
                {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}}, {"hidden_act", "silu"},
                {"tie_word_embeddings", false}};
  if (moe) {
    out.config.update({{"moe_intermediate_size", kF}, {"num_local_experts", kE}, {"num_experts_per_tok", 2},
                       {"norm_topk_prob", false}, {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array()},
                       {"router_aux_loss_coef", 0.001}, {"output_router_logits", false}});
  } else {
    out.config.update({{"max_window_layers", 28}, {"layer_types", {"full_attention", "full_attention"}}});
  }
  auto& w = out.tensors;
  w["model.embed_tokens.weight"] = testing::random_tensor({kV, kD}, rng);
  for (int i = 0; i < 2; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    testing::add_llama_attention(w, p, kD, kQ, kKv, rng);
    w[p + "self_attn.q_norm.weight"] = testing::random_tensor({kHd}, rng);
    w[p + "self_attn.k_norm.weight"] = testing::random_tensor({kHd}, rng);
    if (moe) {
      w[p + "mlp.gate.weight"] = testing::random_tensor({kE, kD}, rng);
      for (int j = 0; j < kE; ++j) {
        const std::string e = fmt::format("{}mlp.experts.{}.", p, j);
        w[e + "gate_proj.weight"] = testing::random_tensor({kF, kD}, rng);
        w[e + "up_proj.weight"] = testing::random_tensor({kF, kD}, rng);
        w[e + "down_proj.weight"] = testing::random_tensor({kD, kF}, rng);
      }
    } else {
      w[p + "mlp.gate_proj.weight"] = testing::random_tensor({kF, kD}, rng);
      w[p + "mlp.up_proj.weight"] = testing::random_tensor({kF, kD}, rng);
      w[p + "mlp.down_proj.weight"] = testing::random_tensor({kD, kF}, rng);
    }
  }
  w["model.norm.weight"] = testing::random_tensor({kD}, rng);
  w["lm_head.weight"] = testing::random_tensor({kV, kD}, rng);
  return out;
}

void expect_round_trip(bool moe) {
  const HfFixture f = qwen3_fixture(moe);
  const testing::RoundTrip rt = testing::expect_round_trip(f, moe ? "qwen3_moe" : "qwen3", 2);
  const HfCheckpoint& ck = rt.imported;
  const json& m = ck.config.model;
  EXPECT_EQ(m.at("type"), moe ? "moe" : "llama");
  EXPECT_EQ(m.at("qk_norm"), true);
  EXPECT_EQ(m.at("seq_len"), 1024);  // min(max_position_embeddings, 1024)
  EXPECT_EQ(m.at("max_seq_len"), 2048);
  EXPECT_EQ(m.at("ffn_hidden_size"), kF);  // moe: moe_intermediate_size, not intermediate_size
  EXPECT_EQ(ck.tensors.at("blocks.1.attn.q_norm.weight"), f.tensors.at("model.layers.1.self_attn.q_norm.weight").values);
  EXPECT_EQ(ck.tensors.at("blocks.0.attn.k_norm.weight"), f.tensors.at("model.layers.0.self_attn.k_norm.weight").values);
  if (moe) {
    EXPECT_EQ(m.at("n_experts"), kE);
    EXPECT_EQ(m.at("normalize_top_k"), false);  // norm_topk_prob
    testing::expect_stacked_rows(ck, "blocks.1.moe.experts.up.weight", f,
                                 [](int j) { return fmt::format("model.layers.1.mlp.experts.{}.up_proj.weight", j); }, kE);
    EXPECT_EQ(ck.tensors.at("blocks.0.moe.router.weight"), f.tensors.at("model.layers.0.mlp.gate.weight").values);
  }
  const json& config = rt.exported_config;
  EXPECT_EQ(config.at("architectures").at(0), moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM");
  EXPECT_EQ(config.at("head_dim"), kHd);
  if (moe) {
    EXPECT_EQ(config.at("moe_intermediate_size"), kF);
    EXPECT_EQ(config.at("norm_topk_prob"), false);
    EXPECT_EQ(config.at("mlp_only_layers"), json::array());
  }
}

TEST(HfQwen3, DenseImportsItsQkNormsAndExportGivesEveryTensorBack) { expect_round_trip(false); }

TEST(HfQwen3, MoeImportsStackedExpertsAndQkNormsAndExportGivesThemBack) { expect_round_trip(true); }

TEST(HfQwen3, TheQkNormsChooseTheClassOnExport) {
  json llama = read_hf_config(qwen3_fixture(false).config, "config.json").model;
  json moe = read_hf_config(qwen3_fixture(true).config, "config.json").model;
  EXPECT_EQ(hf_config_json(llama, "float32").at("architectures").at(0), "Qwen3ForCausalLM");
  EXPECT_EQ(hf_config_json(moe, "float32").at("architectures").at(0), "Qwen3MoeForCausalLM");
  llama["qk_norm"] = false;
  moe["qk_norm"] = false;
  EXPECT_EQ(hf_config_json(llama, "float32").at("architectures").at(0), "LlamaForCausalLM");
  // Without q/k norms a moe model is a Mixtral, which always renormalises: normalize_top_k false is refused.
  EXPECT_NE(error_of([&] { hf_config_json(moe, "float32"); }).find("model.normalize_top_k is false"),
            std::string::npos);
  moe["normalize_top_k"] = true;
  EXPECT_EQ(hf_config_json(moe, "float32").at("architectures").at(0), "MixtralForCausalLM");
  llama["qk_norm"] = true;
  llama["qkv_bias"] = true;  // Qwen2's biases with Qwen3's norms: no class
  EXPECT_NE(error_of([&] { hf_config_json(llama, "float32"); }).find("model.qk_norm true"), std::string::npos);
}

TEST(HfQwen3, WhatCleaveComputesDifferentlyIsOneErrorNamingIt) {
  const auto import_error = [](bool moe, const char* key, json value) {
    HfFixture f = qwen3_fixture(moe);
    f.config[key] = std::move(value);
    return error_of([&] { read_hf_config(f.config, "config.json"); });
  };
  const auto& has = expect_contains;
  has(import_error(true, "mlp_only_layers", json::array({1})), "mlp_only_layers is [1]");
  has(import_error(true, "decoder_sparse_step", 2), "decoder_sparse_step is 2");
  has(import_error(true, "num_experts_per_tok", 5), "num_experts_per_tok 5 is larger than num_local_experts 4");
  has(import_error(true, "num_experts", 3), "num_experts 3 and num_local_experts 4 differ");
  has(import_error(false, "attention_bias", true), "attention_bias is true");
  has(import_error(true, "use_sliding_window", true), "use_sliding_window is true");
  has(import_error(false, "head_dim", 8), "head_dim is 8");
}

}  // namespace
}  // namespace cleave::hf::qwen3_test
