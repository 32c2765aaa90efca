// hf_config_json with a source config.json (engine/hf/hf_config.cpp): an imported model's export keeps the
// source's value of every key that does not change the model (Mixtral's head_dim null, a MoE's unused dense
// intermediate_size, Qwen2-MoE's sliding_window with use_sliding_window false, GPT-2's n_inner null), writes
// Cleave's value of every key that does (a GPT-2 trained at a shorter seq_len), and a model without a source
// gets Cleave's values as before.
#include <gtest/gtest.h>

#include "engine/hf/hf_config.hpp"
#include "unit/hf/hf_fixture.hpp"

namespace cleave::hf::hf_config_source_test {
namespace {

using nlohmann::json;

json mixtral_config() {
  return {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"vocab_size", 50},
          {"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", nullptr}, {"intermediate_size", 96}, {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5}, {"num_local_experts", 4}, {"num_experts_per_tok", 2},
          {"router_aux_loss_coef", 0.02}, {"router_jitter_noise", 0.0}, {"sliding_window", nullptr},
          {"rope_theta", 1e6}, {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
}

json qwen2_moe_config() {
  return {{"architectures", {"Qwen2MoeForCausalLM"}}, {"model_type", "qwen2_moe"}, {"vocab_size", 50},
          {"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"intermediate_size", 96}, {"moe_intermediate_size", 48}, {"shared_expert_intermediate_size", 96},
          {"num_experts", 4}, {"num_experts_per_tok", 2}, {"norm_topk_prob", false}, {"decoder_sparse_step", 1},
          {"mlp_only_layers", json::array()}, {"qkv_bias", true}, {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-6}, {"use_sliding_window", false}, {"sliding_window", 0}, {"max_window_layers", 28},
          {"rope_theta", 1e6}, {"hidden_act", "silu"}, {"tie_word_embeddings", true}};
}

json gpt2_config() {
  json out = testing::gpt2_fixture().config;
  out["n_inner"] = nullptr;  // 4·n_embd = 64
  out["n_ctx"] = 12;
  return out;
}

// The export of `source` imported as it is (model: its model section, optionally edited by the caller).
json exported(const json& source, const json& model) { return hf_config_json(model, "float32", source); }

TEST(HfConfigSource, MixtralKeepsTheSourcesNullHeadDim) {
  const json source = mixtral_config();
  const json model = read_hf_config(source, "config.json").model;
  const json out = exported(source, model);
  EXPECT_TRUE(out.at("head_dim").is_null()) << out.at("head_dim");
  EXPECT_EQ(read_hf_config(out, "out").model, model);
  // Without a source (a model Cleave made): Cleave's value, as before.
  EXPECT_EQ(hf_config_json(model, "float32").at("head_dim"), 16);
}

TEST(HfConfigSource, Qwen2MoeKeepsTheUnusedIntermediateSizeAndSlidingWindow) {
  const json source = qwen2_moe_config();
  const json model = read_hf_config(source, "config.json").model;
  const json out = exported(source, model);
  EXPECT_EQ(out.at("intermediate_size"), 96);  // the dense width; every layer is sparse
  EXPECT_EQ(out.at("moe_intermediate_size"), 48);
  EXPECT_EQ(out.at("sliding_window"), 0);  // use_sliding_window false: no window
  EXPECT_EQ(out.at("use_sliding_window"), false);
  EXPECT_EQ(read_hf_config(out, "out").model, model);
  const json fresh = hf_config_json(model, "float32");
  EXPECT_EQ(fresh.at("intermediate_size"), 48);
  EXPECT_TRUE(fresh.at("sliding_window").is_null()) << fresh.at("sliding_window");
}

TEST(HfConfigSource, Gpt2KeepsTheSourcesNullNInner) {
  const json source = gpt2_config();
  const json model = read_hf_config(source, "config.json").model;
  ASSERT_EQ(model.at("d_ff"), 64);
  const json out = exported(source, model);
  EXPECT_TRUE(out.at("n_inner").is_null()) << out.at("n_inner");
  EXPECT_EQ(out.at("resid_pdrop"), 0.1);  // dropout: the source's, as before
  EXPECT_EQ(read_hf_config(out, "out").model, model);
  EXPECT_EQ(hf_config_json(model, "float32").at("n_inner"), 64);
}

TEST(HfConfigSource, KeysTheModelChangedTakeCleavesValue) {
  // A GPT-2 fine-tuned at seq_len 8 of 12: its position table has 8 rows, so n_positions and its legacy name
  // n_ctx say 8 (the source's n_ctx alone would read the same, as n_positions wins, but would contradict it).
  const json source = gpt2_config();
  json model = read_hf_config(source, "config.json").model;
  model["seq_len"] = 8;
  const json out = exported(source, model);
  EXPECT_EQ(out.at("n_positions"), 8);
  EXPECT_EQ(out.at("n_ctx"), 8);
  EXPECT_TRUE(out.at("n_inner").is_null());
  EXPECT_EQ(out.at("dtype"), "float32");
  EXPECT_EQ(read_hf_config(out, "out").model, model);
}

}  // namespace
}  // namespace cleave::hf::hf_config_source_test
