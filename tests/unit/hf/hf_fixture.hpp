// Hugging Face model directories written by the tests themselves (no downloads): a config.json as
// transformers writes it for GPT2LMHeadModel / LlamaForCausalLM and the weights under transformers' names and
// shapes (MistralForCausalLM and Qwen2ForCausalLM as variants of the Llama one), drawn fresh (normal, seeded; non-zero), in one model.safetensors or in shards with
// model.safetensors.index.json, stored as F32, BF16 or F16. Tests edit `config` and `tensors` before write() to make bad inputs.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors.hpp"
#include "engine/comm/host_reduce.hpp"
#include "engine/core/dtype.hpp"

namespace cleave::hf::testing {

struct HfTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

struct HfFixture {
  nlohmann::json config;
  std::map<std::string, HfTensor> tensors;  // HF name -> f32 values in HF order
  std::string dtype = "F32";                // as stored: "F32", "BF16" or "F16" (rounded to nearest even)

  // Writes config.json and the tensors into `dir` (created): `shards` files with an index when > 1.
  void write(const std::filesystem::path& dir, int shards = 1) const {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    std::vector<std::vector<checkpoint::TensorToWrite>> files(static_cast<std::size_t>(shards));
    nlohmann::json weight_map = nlohmann::json::object();
    std::vector<std::vector<std::uint16_t>> narrow;  // 16-bit copies, alive until the files are written
    narrow.reserve(tensors.size());
    std::size_t i = 0;
    for (const auto& [name, t] : tensors) {
      const std::size_t f = i++ % files.size();
      const std::string file = shards == 1 ? "model.safetensors"
                                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, shards);
      std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(t.values));
      if (dtype != "F32") {
        auto& bits = narrow.emplace_back();
        for (float v : t.values) bits.push_back(dtype == "BF16" ? float_to_bf16(v) : comm::float_to_f16(v));
        bytes = std::as_bytes(std::span<const std::uint16_t>(bits));
      }
      files[f].push_back({name, dtype, t.shape, bytes});
      weight_map[name] = file;
    }
    for (std::size_t f = 0; f < files.size(); ++f) {
      const std::string file = shards == 1 ? "model.safetensors"
                                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, shards);
      checkpoint::write_safetensors((dir / file).string(), files[f], {{"format", "pt"}});
    }
    if (shards > 1) {
      std::ofstream(dir / "model.safetensors.index.json")
          << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2);
    }
  }
};

inline HfTensor random_tensor(std::vector<std::int64_t> shape, std::mt19937& rng) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  std::normal_distribution<float> normal(0.0f, 0.5f);
  HfTensor t{std::move(shape), std::vector<float>(static_cast<std::size_t>(n))};
  for (float& v : t.values) v = normal(rng);
  return t;
}

// Layer `prefix` ("model.layers.{i}.")'s norms and attention projections under transformers' names (Llama and the
// families built like it): input_layernorm [d], q_proj [q, d], k_proj and v_proj [kv, d], o_proj [d, q],
// post_attention_layernorm [d], drawn in that order.
inline void add_llama_attention(std::map<std::string, HfTensor>& w, const std::string& prefix, std::int64_t d,
                                std::int64_t q, std::int64_t kv, std::mt19937& rng) {
  w[prefix + "input_layernorm.weight"] = random_tensor({d}, rng);
  w[prefix + "self_attn.q_proj.weight"] = random_tensor({q, d}, rng);
  w[prefix + "self_attn.k_proj.weight"] = random_tensor({kv, d}, rng);
  w[prefix + "self_attn.v_proj.weight"] = random_tensor({kv, d}, rng);
  w[prefix + "self_attn.o_proj.weight"] = random_tensor({d, q}, rng);
  w[prefix + "post_attention_layernorm.weight"] = random_tensor({d}, rng);
}

// A tiny GPT-2: V 261, D 16, 2 layers, 4 heads, 12 positions, n_inner 24 (not 4·D, so a swapped shape shows).
inline HfFixture gpt2_fixture(bool tied = true, unsigned seed = 11) {
  std::mt19937 rng(seed);
  const std::int64_t v = 261, d = 16, t = 12, f = 24;
  HfFixture out;
  out.config = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", v},
                {"n_embd", d}, {"n_layer", 2}, {"n_head", 4}, {"n_positions", t}, {"n_inner", f},
                {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}, {"tie_word_embeddings", tied},
                {"scale_attn_weights", true}, {"resid_pdrop", 0.1}, {"torch_dtype", "float32"}};
  auto& w = out.tensors;
  w["transformer.wte.weight"] = random_tensor({v, d}, rng);
  w["transformer.wpe.weight"] = random_tensor({t, d}, rng);
  for (int i = 0; i < 2; ++i) {
    const std::string p = fmt::format("transformer.h.{}.", i);
    for (const char* ln : {"ln_1", "ln_2"}) {
      w[p + ln + ".weight"] = random_tensor({d}, rng);
      w[p + ln + ".bias"] = random_tensor({d}, rng);
    }
    w[p + "attn.c_attn.weight"] = random_tensor({d, 3 * d}, rng);
    w[p + "attn.c_attn.bias"] = random_tensor({3 * d}, rng);
    w[p + "attn.c_proj.weight"] = random_tensor({d, d}, rng);
    w[p + "attn.c_proj.bias"] = random_tensor({d}, rng);
    w[p + "mlp.c_fc.weight"] = random_tensor({d, f}, rng);
    w[p + "mlp.c_fc.bias"] = random_tensor({f}, rng);
    w[p + "mlp.c_proj.weight"] = random_tensor({f, d}, rng);
    w[p + "mlp.c_proj.bias"] = random_tensor({d}, rng);
    w[p + "attn.bias"] = random_tensor({1, 1, t, t}, rng);  // the causal-mask buffer older files hold
  }
  w["transformer.ln_f.weight"] = random_tensor({d}, rng);
  w["transformer.ln_f.bias"] = random_tensor({d}, rng);
  if (!tied) w["lm_head.weight"] = random_tensor({v, d}, rng);
  return out;
}

// A tiny Llama with grouped-query attention: V 300, D 32, 2 layers, 8 heads over 2 kv heads, F 40.
inline HfFixture llama_fixture(bool tied = false, unsigned seed = 12) {
  std::mt19937 rng(seed);
  const std::int64_t v = 300, d = 32, f = 40, q = 32, kv = 8;
  HfFixture out;
  out.config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", v},
                {"hidden_size", d}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
                {"num_key_value_heads", 2}, {"intermediate_size", f}, {"max_position_embeddings", 16},
                {"rms_norm_eps", 1e-6}, {"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}},
                {"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false},
                {"tie_word_embeddings", tied}, {"head_dim", 4}};
  auto& w = out.tensors;
  w["model.embed_tokens.weight"] = random_tensor({v, d}, rng);
  for (int i = 0; i < 2; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    add_llama_attention(w, p, d, q, kv, rng);
    w[p + "mlp.gate_proj.weight"] = random_tensor({f, d}, rng);
    w[p + "mlp.up_proj.weight"] = random_tensor({f, d}, rng);
    w[p + "mlp.down_proj.weight"] = random_tensor({d, f}, rng);
  }
  w["model.norm.weight"] = random_tensor({d}, rng);
  if (!tied) w["lm_head.weight"] = random_tensor({v, d}, rng);
  return out;
}

// The llama fixture as transformers' MistralForCausalLM with sliding_window `window` (<= 0: null).
inline HfFixture mistral_fixture(std::int64_t window = 4, unsigned seed = 13) {
  HfFixture out = llama_fixture(false, seed);
  out.config["architectures"] = {"MistralForCausalLM"};
  out.config["model_type"] = "mistral";
  out.config.erase("attention_bias");
  out.config.erase("mlp_bias");
  out.config["sliding_window"] = window > 0 ? nlohmann::json(window) : nlohmann::json();
  return out;
}

// The llama fixture as transformers' Qwen2ForCausalLM: q, k and v biases, tied head, window off.
inline HfFixture qwen2_fixture(unsigned seed = 14) {
  HfFixture out = llama_fixture(true, seed);
  std::mt19937 rng(seed + 100);
  out.config["architectures"] = {"Qwen2ForCausalLM"};
  out.config["model_type"] = "qwen2";
  out.config.erase("attention_bias");
  out.config.erase("mlp_bias");
  out.config["use_sliding_window"] = false;
  out.config["sliding_window"] = 16;
  out.config["max_window_layers"] = 2;
  out.config["bos_token_id"] = 1;
  out.config["eos_token_id"] = 2;
  for (int i = 0; i < 2; ++i) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", i);
    out.tensors[p + "q_proj.bias"] = random_tensor({32}, rng);
    out.tensors[p + "k_proj.bias"] = random_tensor({8}, rng);
    out.tensors[p + "v_proj.bias"] = random_tensor({8}, rng);
  }
  return out;
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / fmt::format("cleave_hf_{}_{}", name, ::getpid());
  std::filesystem::remove_all(p);
  return p;
}

}  // namespace cleave::hf::testing
