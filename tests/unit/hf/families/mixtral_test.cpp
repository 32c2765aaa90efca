// MixtralForCausalLM through the HF table (engine/hf/families/mixtral.cpp): a fixture written by the test (one
// tensor per expert, as save_pretrained writes them) imports into Cleave's stacked expert tensors row for row,
// exports back to the same tensors bit for bit with the same model section, and every setting Cleave computes
// differently (router jitter, a sliding window; on export another router, no renormalisation, shared experts)
// or another mixture (Qwen2-MoE) is one error naming it.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/hf/hf_config.hpp"
#include "unit/hf/families/family_fixture.hpp"

namespace cleave::hf::mixtral_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::expect_contains;
using testing::HfFixture;

constexpr std::int64_t kV = 50, kD = 16, kF = 12, kE = 4, kQ = 16, kKv = 8;

HfFixture mixtral_fixture(unsigned seed = 21) {
  std::mt19937 rng(seed);
  HfFixture out;
  out.config = {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"vocab_size", kV},
                {"hidden_size", kD}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", nullptr}, {"intermediate_size", kF},
                {"max_position_embeddings", 16}, {"rms_norm_eps", 1e-5}, {"num_local_experts", kE},
                {"num_experts_per_tok", 2}, {"router_aux_loss_coef", 0.02}, {"router_jitter_noise", 0.0},
                {"sliding_window", nullptr}, {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
                {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
  auto& w = out.tensors;
  w["model.embed_tokens.weight"] = testing::random_tensor({kV, kD}, rng);
  for (int i = 0; i < 2; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    testing::add_llama_attention(w, p, kD, kQ, kKv, rng);
    w[p + "block_sparse_moe.gate.weight"] = testing::random_tensor({kE, kD}, rng);
    for (int j = 0; j < kE; ++j) {
      const std::string e = fmt::format("{}block_sparse_moe.experts.{}.", p, j);
      w[e + "w1.weight"] = testing::random_tensor({kF, kD}, rng);
      w[e + "w2.weight"] = testing::random_tensor({kD, kF}, rng);
      w[e + "w3.weight"] = testing::random_tensor({kF, kD}, rng);
    }
  }
  w["model.norm.weight"] = testing::random_tensor({kD}, rng);
  w["lm_head.weight"] = testing::random_tensor({kV, kD}, rng);
  return out;
}

TEST(HfMixtral, ImportStacksTheExpertsAndExportGivesEveryTensorBack) {
  const HfFixture f = mixtral_fixture();
  const testing::RoundTrip rt = testing::expect_round_trip(f, "mixtral", 3);
  const HfCheckpoint& ck = rt.imported;
  EXPECT_EQ(ck.config.model.at("type"), "moe");
  EXPECT_EQ(ck.config.model.at("n_experts"), kE);
  EXPECT_EQ(ck.config.model.at("top_k"), 2);
  EXPECT_EQ(ck.config.model.at("router"), "softmax");
  EXPECT_EQ(ck.config.model.at("normalize_top_k"), true);
  EXPECT_EQ(ck.config.model.at("aux_loss_coef"), 0.02);
  EXPECT_EQ(ck.config.model.at("rope_theta"), 1e6);
  EXPECT_EQ(ck.config.model.at("norm_eps"), 1e-5);
  // Row j of each stacked tensor is expert j's tensor.
  EXPECT_EQ(ck.shapes.at("blocks.1.moe.experts.down.weight"), (std::vector<std::int64_t>{kE, kD, kF}));
  ASSERT_EQ(ck.tensors.at("blocks.1.moe.experts.gate.weight").size(), static_cast<std::size_t>(kE * kF * kD));
  const auto expert = [](const char* w) {
    return [w](int j) { return fmt::format("model.layers.1.block_sparse_moe.experts.{}.{}.weight", j, w); };
  };
  testing::expect_stacked_rows(ck, "blocks.1.moe.experts.gate.weight", f, expert("w1"), kE);
  testing::expect_stacked_rows(ck, "blocks.1.moe.experts.down.weight", f, expert("w2"), kE);
  EXPECT_EQ(ck.tensors.at("blocks.0.moe.router.weight"), f.tensors.at("model.layers.0.block_sparse_moe.gate.weight").values);
  EXPECT_EQ(rt.exported_config.at("architectures").at(0), "MixtralForCausalLM");
  EXPECT_EQ(rt.exported_config.at("num_local_experts"), kE);
  EXPECT_EQ(rt.exported_config.at("num_experts_per_tok"), 2);
}

TEST(HfMixtral, WhatCleaveComputesDifferentlyIsOneErrorNamingIt) {
  const auto import_error = [](auto edit) {
    HfFixture f = mixtral_fixture();
    edit(f);
    const fs::path dir = testing::fresh_dir("mixtral_bad");
    f.write(dir);
    const std::string e = error_of([&] { read_hf_checkpoint(dir.string()); });
    fs::remove_all(dir);
    return e;
  };
  const auto& has = expect_contains;
  has(import_error([](HfFixture& f) { f.config["router_jitter_noise"] = 0.1; }), "router_jitter_noise is 0.1");
  has(import_error([](HfFixture& f) { f.config["sliding_window"] = 4; }), "sliding_window is 4");
  has(import_error([](HfFixture& f) { f.config["num_experts_per_tok"] = 5; }),
      "num_experts_per_tok 5 is larger than num_local_experts 4");
  // An expert count the tensors do not have: the router's shape names both.
  has(import_error([](HfFixture& f) { f.config["num_local_experts"] = 3; }),
      "block_sparse_moe.gate.weight has shape [4,16], but config.json's sizes give [3,16]");
  has(import_error([](HfFixture& f) {
        f.config["architectures"] = {"DeepseekV3ForCausalLM"};
        f.config["model_type"] = "deepseek_v3";
      }),
      "architecture DeepseekV3ForCausalLM is not supported");

  const json model = read_hf_config(mixtral_fixture().config, "config.json").model;
  const auto export_error = [&](const char* key, json value) {
    json m = model;
    m[key] = std::move(value);
    return error_of([&] { hf_config_json(m, "float32"); });
  };
  has(export_error("router", "sigmoid"), "model.router is \"sigmoid\"");
  has(export_error("normalize_top_k", false), "model.normalize_top_k is false");
  has(export_error("n_shared_experts", 1), "model.n_shared_experts is 1");
  // A Mixtral import keeps llama's lengths: seq_len min(max_position_embeddings, 1024), max_seq_len the maximum.
  EXPECT_EQ(model.at("seq_len"), 16);
  EXPECT_EQ(model.at("max_seq_len"), 16);
}

}  // namespace
}  // namespace cleave::hf::mixtral_test
