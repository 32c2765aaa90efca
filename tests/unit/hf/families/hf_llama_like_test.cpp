// MistralForCausalLM and Qwen2ForCausalLM through the llama family (engine/hf/families/llama_like.cpp) on
// directories the test writes (hf_fixture.hpp): the window and the biases arrive in the model section and the
// tensors; every key that changes the numbers is checked (a relabelled Mistral, a model_type that is not the
// class's, Qwen2's use_sliding_window, an unknown key are each one Error naming the key); the default seq_len
// of a long-context model; and an imported-then-exported config.json differs from the source only in the keys
// docs/checkpoints.md lists (torch_dtype -> dtype), with generation_config.json and the tokenizer files carried.
#include <fstream>
#include <functional>
#include <set>

#include <gtest/gtest.h>

#include "engine/core/error.hpp"
#include "engine/hf/hf_export.hpp"
#include "engine/hf/hf_import.hpp"
#include "unit/hf/hf_fixture.hpp"

namespace cleave::hf::hf_llama_like_test {
namespace {

using nlohmann::json;
using testing::HfFixture;
namespace fs = std::filesystem;

HfCheckpoint import(const HfFixture& f, const std::string& name) {
  const fs::path dir = testing::fresh_dir(name);
  f.write(dir);
  HfCheckpoint out = read_hf_checkpoint(dir.string());
  fs::remove_all(dir);
  return out;
}

std::string import_error(HfFixture f, const std::function<void(HfFixture&)>& edit) {
  edit(f);
  try {
    import(f, "bad_family");
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "imported";
  return {};
}

void has(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

TEST(HfLlamaLike, MistralWindowIsReadAndNullIsLlama) {
  const HfCheckpoint m = import(testing::mistral_fixture(4), "mistral");
  EXPECT_EQ(m.config.dims.architecture, Architecture::kMistral);
  EXPECT_EQ(m.config.model.at("sliding_window"), 4);
  EXPECT_EQ(m.config.model.at("qkv_bias"), false);
  EXPECT_EQ(m.tensors.size(), 1u + 9 * 2 + 1 + 1);
  const HfCheckpoint none = import(testing::mistral_fixture(0), "mistral_null");
  EXPECT_EQ(none.config.model.at("sliding_window"), 0);
  // With the window null the model section is exactly the Llama one.
  HfFixture llama = testing::llama_fixture(false, 13);
  EXPECT_EQ(import(llama, "llama_same").config.model, none.config.model);
  EXPECT_EQ(import(llama, "llama_same").tensors, none.tensors);
}

TEST(HfLlamaLike, Qwen2BiasesAreImported) {
  const HfFixture f = testing::qwen2_fixture();
  const HfCheckpoint q = import(f, "qwen2");
  EXPECT_EQ(q.config.dims.architecture, Architecture::kQwen2);
  EXPECT_EQ(q.config.model.at("qkv_bias"), true);
  EXPECT_EQ(q.config.model.at("sliding_window"), 0);
  EXPECT_EQ(q.tensors.at("blocks.1.attn.k.bias"), f.tensors.at("model.layers.1.self_attn.k_proj.bias").values);
  EXPECT_EQ(q.tensors.at("blocks.0.attn.q.bias"), f.tensors.at("model.layers.0.self_attn.q_proj.bias").values);
  EXPECT_EQ(q.tensors.size(), 1u + 12 * 2 + 1);  // tied: no head
  has(import_error(f, [](HfFixture& g) { g.tensors.erase("model.layers.0.self_attn.v_proj.bias"); }),
      "missing tensor model.layers.0.self_attn.v_proj.bias");
}

// Qwen2's window: from layer max_window_layers on, as transformers' layer_types; none past the last layer.
TEST(HfLlamaLike, Qwen2WindowFromALayerOn) {
  HfFixture f = testing::qwen2_fixture();
  f.config["use_sliding_window"] = true;
  f.config["sliding_window"] = 4;
  f.config["max_window_layers"] = 1;
  f.config["layer_types"] = {"full_attention", "sliding_attention"};
  const HfCheckpoint q = import(f, "qwen2_window");
  EXPECT_EQ(q.config.model.at("sliding_window"), 4);
  EXPECT_EQ(q.config.model.at("sliding_window_from_layer"), 1);
  const json out = hf_config_json(q.config.model, "float32");
  EXPECT_EQ(out.at("architectures"), json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(out.at("use_sliding_window"), true);
  EXPECT_EQ(out.at("sliding_window"), 4);
  EXPECT_EQ(out.at("max_window_layers"), 1);
  f.config["max_window_layers"] = 2;  // past the last layer: no window
  f.config["layer_types"] = {"full_attention", "full_attention"};
  const HfCheckpoint none = import(f, "qwen2_no_window");
  EXPECT_EQ(none.config.model.at("sliding_window"), 0);
  EXPECT_EQ(none.config.model.at("sliding_window_from_layer"), 0);
}

TEST(HfLlamaLike, EveryKeyThatChangesTheNumbersIsChecked) {
  // A Mistral relabelled as Llama: transformers would ignore the window, the weights were trained with it.
  has(import_error(testing::llama_fixture(), [](HfFixture& f) { f.config["sliding_window"] = 16; }),
      "sliding_window is 16, a MistralForCausalLM key that LlamaForCausalLM ignores");
  // A null sliding_window in a Llama config means nothing.
  HfFixture null_window = testing::llama_fixture();
  null_window.config["sliding_window"] = nullptr;
  EXPECT_EQ(import(null_window, "llama_null").config.model.at("sliding_window"), 0);
  has(import_error(testing::mistral_fixture(), [](HfFixture& f) { f.config["model_type"] = "llama"; }),
      "architectures names MistralForCausalLM but model_type is \"llama\"");
  has(import_error(testing::qwen2_fixture(), [](HfFixture& f) {
        f.config["use_sliding_window"] = true;
        f.config["sliding_window"] = nullptr;
      }),
      "use_sliding_window is true but sliding_window is absent or null");
  has(import_error(testing::qwen2_fixture(), [](HfFixture& f) { f.config["layer_types"] = {"full_attention", "sliding_attention"}; }),
      "layer_types[1] is \"sliding_attention\", but the other keys (sliding_window, use_sliding_window, "
      "max_window_layers) give layer 1 full attention");
  has(import_error(testing::llama_fixture(), [](HfFixture& f) { f.config["quantization_config"] = {{"bits", 4}}; }),
      "key \"quantization_config\"");
  has(import_error(testing::mistral_fixture(), [](HfFixture& f) { f.config["logit_softcapping"] = 30.0; }),
      "key \"logit_softcapping\" (30.0) is not one Cleave knows for MistralForCausalLM");
  has(import_error(testing::llama_fixture(), [](HfFixture& f) { f.config["rope_parameters"]["factor"] = 8.0; }),
      "rope_parameters.factor is not a key");
  has(import_error(testing::llama_fixture(), [](HfFixture& f) { f.config["pretraining_tp"] = 2; }),
      "pretraining_tp is 2");
  has(import_error(testing::gpt2_fixture(), [](HfFixture& f) { f.config["model_type"] = "llama"; }),
      "model_type is \"llama\"");
  // A class Cleave does not import (MixtralForCausalLM now is one it does: mixtral_test.cpp).
  has(import_error(testing::gpt2_fixture(), [](HfFixture& f) { f.config["architectures"] = {"GemmaForCausalLM"}; }),
      "architecture GemmaForCausalLM is not supported");
  // A supported class with another class's model_type.
  has(import_error(testing::gpt2_fixture(), [](HfFixture& f) { f.config["architectures"] = {"MixtralForCausalLM"}; }),
      "architectures names MixtralForCausalLM but model_type is \"gpt2\" (that class's model_type is \"mixtral\")");
}

TEST(HfLlamaLike, LongContextModelsImportAtADefaultSeqLen) {
  HfFixture f = testing::llama_fixture();
  f.config["max_position_embeddings"] = 8192;
  const HfCheckpoint got = import(f, "long");
  EXPECT_EQ(got.config.model.at("seq_len"), kImportSeqLen);
  EXPECT_EQ(got.config.model.at("max_seq_len"), 8192);
  EXPECT_EQ(import(testing::llama_fixture(), "short").config.model.at("seq_len"), 16);  // below the default
  // GPT-2's learned table: seq_len is the table's rows; dropout is noted as having no Cleave meaning.
  const HfCheckpoint gpt = import(testing::gpt2_fixture(), "gpt_notes");
  EXPECT_EQ(gpt.config.model.at("seq_len"), 12);
  ASSERT_FALSE(gpt.config.notes.empty());
  has(gpt.config.notes.front(), "resid_pdrop is 0.1 but Cleave trains without dropout");
}

// config.json keys whose value differs, or that one side lacks.
std::set<std::string> differing_keys(const json& a, const json& b) {
  std::set<std::string> out;
  for (const auto& [key, value] : a.items()) {
    if (!b.contains(key) || b.at(key) != value) out.insert(key);
  }
  for (const auto& [key, value] : b.items()) {
    if (!a.contains(key)) out.insert(key);
  }
  return out;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(HfLlamaLike, ImportedThenExportedConfigDiffersOnlyInListedKeys) {
  // docs/checkpoints.md: torch_dtype (deprecated) becomes dtype; nothing else.
  const std::set<std::string> listed = {"torch_dtype", "dtype"};
  int case_number = 0;
  for (HfFixture f : {testing::gpt2_fixture(), testing::llama_fixture(), testing::mistral_fixture(4),
                      testing::mistral_fixture(0), testing::qwen2_fixture()}) {
    f.config["transformers_version"] = "4.57.1";
    f.config["initializer_range"] = 0.02;
    const fs::path src = testing::fresh_dir(fmt::format("src{}", case_number));
    const fs::path out = testing::fresh_dir(fmt::format("out{}", case_number++));
    f.write(src);
    std::ofstream(src / "tokenizer.json") << "{\"model\": {}}";
    std::ofstream(src / "generation_config.json") << "{\"bos_token_id\": 1, \"do_sample\": true}";
    const HfCheckpoint in = read_hf_checkpoint(src.string());
    const HfExportStats stats = write_hf_checkpoint(
        out.string(), in.config.model, [&](const std::string& n) { return in.tensors.at(n); },
        {false, 0, hf_source_record(src.string(), in)});
    const json source = read_json(src / "config.json"), exported = read_json(out / "config.json");
    for (const std::string& key : differing_keys(source, exported)) {
      EXPECT_TRUE(listed.count(key)) << f.config.at("architectures") << ": " << key << " differs: "
                                     << source.value(key, json()) << " -> " << exported.value(key, json());
    }
    EXPECT_EQ(exported.at("dtype"), "float32");
    EXPECT_EQ(stats.tokenizer_files, std::vector<std::string>{"tokenizer.json"});
    EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
    EXPECT_EQ(read_json(out / "generation_config.json"), read_json(src / "generation_config.json"));
    const HfCheckpoint back = read_hf_checkpoint(out.string());
    EXPECT_EQ(back.config.model, in.config.model);
    EXPECT_EQ(back.config.dims.architecture, in.config.dims.architecture);
    EXPECT_EQ(back.tensors, in.tensors);
    fs::remove_all(src);
    fs::remove_all(out);
  }
}

TEST(HfLlamaLike, ExportWithoutASourcePicksTheClassThatHoldsTheModel) {
  const json base = {{"type", "llama"}, {"vocab_size", 300}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 8},
                     {"n_kv_heads", 2}, {"seq_len", 16}, {"ffn_hidden_size", 40}, {"rope_theta", 10000.0},
                     {"norm_eps", 1e-5}, {"tie_embeddings", true}, {"max_seq_len", 64}, {"sliding_window", 0},
                     {"qkv_bias", false}};
  json window = base, bias = base, both = base;
  window["sliding_window"] = 8;
  bias["qkv_bias"] = true;
  both["sliding_window"] = 8;
  both["qkv_bias"] = true;
  EXPECT_EQ(hf_config_json(base, "float32").at("architectures"), json({"LlamaForCausalLM"}));
  EXPECT_EQ(hf_config_json(base, "float32").at("max_position_embeddings"), 64);  // max_seq_len, not seq_len
  EXPECT_EQ(hf_config_json(window, "float32").at("architectures"), json({"MistralForCausalLM"}));
  EXPECT_EQ(hf_config_json(window, "float32").at("sliding_window"), 8);
  EXPECT_EQ(hf_config_json(bias, "float32").at("architectures"), json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(hf_config_json(bias, "float32").at("use_sliding_window"), false);
  // A window with biases: Qwen2's window from layer 0.
  EXPECT_EQ(hf_config_json(both, "float32").at("architectures"), json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(hf_config_json(both, "float32").at("use_sliding_window"), true);
  EXPECT_EQ(hf_config_json(both, "float32").at("max_window_layers"), 0);
  json later = window;
  later["sliding_window_from_layer"] = 1;
  try {
    hf_config_json(later, "float32");
    ADD_FAILURE() << "a window from block 1 without biases was exported";
  } catch (const Error& e) {
    has(e.what(), "no Hugging Face class holds this llama model (model.sliding_window 8 from block 1");
  }
}

}  // namespace
}  // namespace cleave::hf::hf_llama_like_test
