// write_hf_checkpoint against read_hf_checkpoint: a GPT and a Llama exported (one file, then shards of a size
// limit with model.safetensors.index.json) re-import bit for bit with the same model section; bf16 rounds to
// nearest even; an existing output is refused and a failed export leaves nothing behind.
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/hf/hf_export.hpp"
#include "engine/hf/hf_import.hpp"
#include "unit/hf/hf_fixture.hpp"

namespace cleave::hf::hf_export_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Cleave-side tensors for every entry of the model's table, fresh normal values.
std::map<std::string, std::vector<float>> random_model(const json& model, unsigned seed) {
  std::mt19937 rng(seed);
  std::map<std::string, std::vector<float>> out;
  for (const TensorMap& m : tensor_map(dims_of_model(model, "test"))) {
    out[m.cleave_name] = testing::random_tensor(m.cleave_shape, rng).values;
  }
  return out;
}

const json kGpt = {{"type", "gpt"}, {"vocab_size", 259}, {"d_model", 16}, {"n_layers", 2}, {"n_heads", 2},
                   {"seq_len", 9}, {"d_ff", 40}, {"tie_embeddings", false}};
const json kLlama = {{"type", "llama"}, {"vocab_size", 300}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 8},
                     {"n_kv_heads", 2}, {"seq_len", 16}, {"ffn_hidden_size", 40}, {"rope_theta", 10000.0},
                     {"norm_eps", 1e-5}, {"tie_embeddings", true}, {"max_seq_len", 16}, {"sliding_window", 0},
                     {"sliding_window_from_layer", 0}, {"qkv_bias", false}, {"qk_norm", false}};

void round_trip(const json& model, std::int64_t max_shard_bytes, std::size_t expect_files) {
  const auto tensors = random_model(model, 3);
  const fs::path dir = testing::fresh_dir("export");
  const HfExportStats stats = write_hf_checkpoint(
      dir.string(), model, [&](const std::string& name) { return tensors.at(name); }, {false, max_shard_bytes, {}});
  EXPECT_EQ(stats.files, static_cast<int>(expect_files));
  EXPECT_EQ(fs::exists(dir / "model.safetensors.index.json"), expect_files > 1);
  const HfCheckpoint back = read_hf_checkpoint(dir.string());
  EXPECT_EQ(back.files.size(), expect_files);
  EXPECT_EQ(back.config.model, model);
  EXPECT_EQ(back.tensors, tensors);  // bit for bit, transposes undone
  fs::remove_all(dir);
}

TEST(HfExport, GptRoundTripsBitExactOneFileAndSharded) {
  round_trip(kGpt, 0, 1);
  round_trip(kGpt, 8 * 1024, 5);  // 259x16 f32 tables are 16.2 KiB: each its own shard
}

TEST(HfExport, LlamaRoundTripsBitExactOneFileAndSharded) {
  round_trip(kLlama, 0, 1);
  round_trip(kLlama, 20 * 1024, 4);
}

TEST(HfExport, ConfigJsonIsWhatTransformersReads) {
  const auto tensors = random_model(kGpt, 4);
  const fs::path dir = testing::fresh_dir("export_config");
  write_hf_checkpoint(dir.string(), kGpt, [&](const std::string& n) { return tensors.at(n); }, {true, 0, {}});
  std::ifstream in(dir / "config.json");
  const json config = json::parse(in);
  EXPECT_EQ(config.at("architectures"), json({"GPT2LMHeadModel"}));
  EXPECT_EQ(config.at("model_type"), "gpt2");
  EXPECT_EQ(config.at("dtype"), "bfloat16");  // transformers' current key; torch_dtype is deprecated
  EXPECT_FALSE(config.contains("torch_dtype"));
  EXPECT_EQ(config.at("n_inner"), 40);
  EXPECT_EQ(config.at("activation_function"), "gelu_new");
  // bf16: every value is the nearest-even rounding of the f32 one.
  const HfCheckpoint back = read_hf_checkpoint(dir.string());
  const auto& got = back.tensors.at("blocks.1.mlp.fc.weight");
  const auto& want = tensors.at("blocks.1.mlp.fc.weight");
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], bf16_to_float(float_to_bf16(want[i])));
  fs::remove_all(dir);
}

TEST(HfExport, ExistingOutputAndFailuresLeaveNothing) {
  const auto tensors = random_model(kGpt, 5);
  const fs::path dir = testing::fresh_dir("export_exists");
  fs::create_directories(dir);
  const auto source = [&](const std::string& n) { return tensors.at(n); };
  try {
    write_hf_checkpoint(dir.string(), kGpt, source, {});
    ADD_FAILURE() << "an existing directory was overwritten";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
  // A tensor of the wrong size: refused before a file is written.
  auto bad = tensors;
  bad["blocks.0.attn.proj.weight"].pop_back();
  try {
    write_hf_checkpoint(dir.string(), kGpt, [&](const std::string& n) { return bad.at(n); }, {});
    ADD_FAILURE() << "a short tensor was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.attn.proj.weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir));
  try {
    dims_of_model(json{{"type", "mlp"}, {"in_features", 8}}, "checkpoint c");
    ADD_FAILURE() << "an mlp was given Hugging Face sizes";
  } catch (const InputError& e) {  // bad input (exit 64), not a plain Error
    EXPECT_NE(std::string(e.what()).find("model.type \"mlp\" has no Hugging Face counterpart"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cleave::hf::hf_export_test
