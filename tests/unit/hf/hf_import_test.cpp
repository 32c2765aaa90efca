// read_hf_checkpoint against directories the test writes (hf_fixture.hpp): GPT-2's Conv1D weights arrive
// transposed into Cleave's [out, in] (the fused c_attn becomes qkv with q|k|v rows), everything else copied
// bit for bit, from one file or from shards with an index (BF16 and F16 widened exactly); config.json becomes
// Cleave's model section; and each bad input (missing shard, wrong shape, unknown architecture, unknown or
// missing tensor, a setting Cleave computes differently) is one Error naming the file and the tensor or key.
#include <functional>

#include <gtest/gtest.h>

#include "engine/comm/host_reduce.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "engine/hf/hf_import.hpp"
#include "unit/hf/hf_fixture.hpp"

namespace cleave::hf::hf_import_test {
namespace {

using testing::HfFixture;
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;  // one line
    return message;
  }
  ADD_FAILURE() << "no error";
  return {};
}

// The error read_hf_checkpoint gives for `fixture` after `edit`.
std::string import_error(HfFixture fixture, const std::function<void(HfFixture&)>& edit, int shards = 1) {
  edit(fixture);
  const fs::path dir = testing::fresh_dir("bad");
  fixture.write(dir, shards);
  std::string message = error_of([&] { read_hf_checkpoint(dir.string()); });
  fs::remove_all(dir);
  return message;
}

void expect_gpt2_converted(const HfFixture& f, const HfCheckpoint& got) {
  const auto& hf = f.tensors;
  const auto& ours = got.tensors;
  EXPECT_EQ(ours.size(), 2u + 12 * 2 + 2);  // tied: no head, no attn.bias buffers
  EXPECT_EQ(ours.at("embed.token"), hf.at("transformer.wte.weight").values);
  EXPECT_EQ(ours.at("embed.position"), hf.at("transformer.wpe.weight").values);
  EXPECT_EQ(ours.at("blocks.1.ln2.bias"), hf.at("transformer.h.1.ln_2.bias").values);
  EXPECT_EQ(ours.at("blocks.0.attn.qkv.bias"), hf.at("transformer.h.0.attn.c_attn.bias").values);
  EXPECT_EQ(ours.at("final_norm.weight"), hf.at("transformer.ln_f.weight").values);
  // Conv1D [in, out] -> Linear [out, in]: qkv row r (q rows 0..15, k 16..31, v 32..47) = c_attn column r.
  const std::int64_t d = 16, f_ff = 24;
  const auto& c_attn = hf.at("transformer.h.1.attn.c_attn.weight").values;
  const auto& qkv = ours.at("blocks.1.attn.qkv.weight");
  ASSERT_EQ(qkv.size(), c_attn.size());
  for (std::int64_t r = 0; r < 3 * d; ++r) {
    for (std::int64_t c = 0; c < d; ++c) ASSERT_EQ(qkv[r * d + c], c_attn[c * 3 * d + r]) << r << "," << c;
  }
  const auto& fc_proj = hf.at("transformer.h.0.mlp.c_proj.weight").values;  // [F, D]
  const auto& proj = ours.at("blocks.0.mlp.proj.weight");                   // [D, F]
  for (std::int64_t r = 0; r < d; ++r) {
    for (std::int64_t c = 0; c < f_ff; ++c) ASSERT_EQ(proj[r * f_ff + c], fc_proj[c * d + r]);
  }
  EXPECT_EQ(got.shapes.at("blocks.0.mlp.fc.weight"), (std::vector<std::int64_t>{24, 16}));
  EXPECT_EQ(got.config.model,
            (nlohmann::json{{"type", "gpt"}, {"vocab_size", 261}, {"d_model", 16}, {"n_layers", 2}, {"n_heads", 4},
                            {"seq_len", 12}, {"d_ff", 24}, {"tie_embeddings", true}}));
}

TEST(HfImport, Gpt2OneFileTransposesConv1dAndCopiesTheRest) {
  const HfFixture f = testing::gpt2_fixture();
  const fs::path dir = testing::fresh_dir("gpt2");
  f.write(dir);
  const HfCheckpoint got = read_hf_checkpoint(dir.string());
  expect_gpt2_converted(f, got);
  EXPECT_EQ(got.files.size(), 1u);
  fs::remove_all(dir);
}

TEST(HfImport, Gpt2ShardedWithIndexGivesTheSameTensors) {
  const HfFixture f = testing::gpt2_fixture();
  const fs::path dir = testing::fresh_dir("gpt2_sharded");
  f.write(dir, 3);
  const HfCheckpoint got = read_hf_checkpoint(dir.string());
  expect_gpt2_converted(f, got);
  EXPECT_EQ(got.files.size(), 3u);
  fs::remove_all(dir);
}

TEST(HfImport, Gpt2WithoutTransformerPrefixAndUntiedHead) {
  HfFixture f = testing::gpt2_fixture(/*tied=*/false);
  HfFixture bare = f;
  bare.tensors.clear();
  for (auto& [name, t] : f.tensors) {
    bare.tensors[name.rfind("transformer.", 0) == 0 ? name.substr(12) : name] = t;  // GPT2Model's names
  }
  const fs::path dir = testing::fresh_dir("gpt2_bare");
  bare.write(dir);
  const HfCheckpoint got = read_hf_checkpoint(dir.string());
  EXPECT_EQ(got.tensors.at("head.weight"), f.tensors.at("lm_head.weight").values);
  EXPECT_EQ(got.tensors.at("embed.token"), f.tensors.at("transformer.wte.weight").values);
  EXPECT_EQ(got.config.model.at("tie_embeddings"), false);
  fs::remove_all(dir);
}

TEST(HfImport, LlamaCopiesEveryTensorAndReadsRopeParameters) {
  const HfFixture f = testing::llama_fixture();
  const fs::path dir = testing::fresh_dir("llama");
  f.write(dir, 2);
  const HfCheckpoint got = read_hf_checkpoint(dir.string());
  EXPECT_EQ(got.tensors.size(), 1u + 9 * 2 + 1 + 1);
  EXPECT_EQ(got.tensors.at("blocks.1.attn.k.weight"), f.tensors.at("model.layers.1.self_attn.k_proj.weight").values);
  EXPECT_EQ(got.tensors.at("blocks.0.mlp.down.weight"), f.tensors.at("model.layers.0.mlp.down_proj.weight").values);
  EXPECT_EQ(got.tensors.at("head.weight"), f.tensors.at("lm_head.weight").values);
  EXPECT_EQ(got.config.model,
            (nlohmann::json{{"type", "llama"}, {"vocab_size", 300}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 8},
                            {"n_kv_heads", 2}, {"seq_len", 16}, {"ffn_hidden_size", 40}, {"rope_theta", 500000.0},
                            {"norm_eps", 1e-6}, {"tie_embeddings", false}, {"max_seq_len", 16},
                            {"sliding_window", 0}, {"sliding_window_from_layer", 0}, {"qkv_bias", false},
                            {"qk_norm", false}}));
  fs::remove_all(dir);
}

TEST(HfImport, Bf16AndF16WeightsWidenExactly) {
  for (const char* dtype : {"BF16", "F16"}) {
    HfFixture f = testing::llama_fixture();
    f.dtype = dtype;
    const fs::path dir = testing::fresh_dir(std::string("llama_") + dtype);
    f.write(dir, 2);
    const HfCheckpoint got = read_hf_checkpoint(dir.string());
    const auto& want = f.tensors.at("model.layers.1.mlp.gate_proj.weight").values;
    const auto& have = got.tensors.at("blocks.1.mlp.gate.weight");
    ASSERT_EQ(have.size(), want.size());
    double differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const float rounded = std::string(dtype) == "BF16" ? bf16_to_float(float_to_bf16(want[i]))
                                                         : comm::f16_to_float(comm::float_to_f16(want[i]));
      ASSERT_EQ(have[i], rounded) << dtype << " element " << i;
      differ += have[i] != want[i];
    }
    EXPECT_GT(differ, want.size() / 2) << dtype << ": the values were not rounded, so the test proves nothing";
    fs::remove_all(dir);
  }
}

TEST(HfImport, EachBadInputIsOneErrorNamingIt) {
  const HfFixture gpt = testing::gpt2_fixture();
  auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  };
  // Missing shard: the index names a file that is not there.
  {
    HfFixture f = gpt;
    const fs::path dir = testing::fresh_dir("missing_shard");
    f.write(dir, 2);
    fs::remove(dir / "model-00002-of-00002.safetensors");
    const std::string m = error_of([&] { read_hf_checkpoint(dir.string()); });
    has(m, "shard model-00002-of-00002.safetensors is missing");
    fs::remove_all(dir);
  }
  std::string m = import_error(gpt, [](HfFixture& f) {
    f.tensors["transformer.h.1.mlp.c_fc.weight"].shape = {24, 16};
  });
  has(m, "transformer.h.1.mlp.c_fc.weight has shape [24,16]");
  has(m, "give [16,24]");
  m = import_error(gpt, [](HfFixture& f) { f.config["architectures"] = {"BertModel"}; });
  has(m, "architecture BertModel is not supported");
  m = import_error(
      gpt, [](HfFixture& f) { f.tensors["transformer.h.0.attn.c_attn.extra"] = f.tensors["transformer.ln_f.bias"]; });
  has(m, "unknown tensor transformer.h.0.attn.c_attn.extra");
  m = import_error(gpt, [](HfFixture& f) { f.tensors.erase("transformer.h.1.ln_1.bias"); }, 2);
  has(m, "missing tensor transformer.h.1.ln_1.bias");
  m = import_error(gpt, [](HfFixture& f) { f.config["activation_function"] = "relu"; });
  has(m, "activation_function is \"relu\"");
  m = import_error(gpt, [](HfFixture& f) { f.config["layer_norm_epsilon"] = 1e-6; });
  has(m, "layer_norm_epsilon is 1e-06");
  m = import_error(gpt, [](HfFixture& f) { f.config.erase("n_embd"); });
  has(m, "n_embd is missing");
  m = import_error(gpt, [](HfFixture& f) {  // a tied head that is not the embedding
    f.tensors["lm_head.weight"] = f.tensors["transformer.wte.weight"];
    f.tensors["lm_head.weight"].values[5] += 1.0f;
  });
  has(m, "lm_head.weight differs from transformer.wte.weight");
}

TEST(HfImport, LlamaSettingsCleaveComputesDifferentlyAreRefused) {
  const HfFixture llama = testing::llama_fixture();
  auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  };
  has(import_error(llama, [](HfFixture& f) { f.config["attention_bias"] = true; }), "attention_bias is true");
  has(import_error(llama, [](HfFixture& f) { f.config["mlp_bias"] = true; }), "mlp_bias is true");
  has(import_error(llama, [](HfFixture& f) { f.config["rope_parameters"]["rope_type"] = "llama3"; }),
      "rope_parameters.rope_type is \"llama3\"");
  has(import_error(llama, [](HfFixture& f) { f.config["hidden_act"] = "gelu"; }), "hidden_act is \"gelu\"");
  has(import_error(llama, [](HfFixture& f) { f.tensors["model.layers.0.self_attn.k_proj.weight"].shape = {32, 8}; }),
      "model.layers.0.self_attn.k_proj.weight has shape [32,8]");
}

}  // namespace
}  // namespace cleave::hf::hf_import_test
