// The Hugging Face architecture table (engine/hf/hf_architecture.hpp): every row is its Architecture's, maps
// to a Cleave family that exists, and round-trips the model section Cleave's config writer produces for that
// family (config.json out, the same sizes and model section back in); the refusals list the rows.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/hf/hf_architecture.hpp"
#include "support/error_of.hpp"

namespace cleave::hf::hf_architecture_test {
namespace {

using nlohmann::json;

using cleave::testing::error_of;

TEST(HfArchitectureTable, EveryRowRoundTripsItsFamilysModelSection) {
  int rows = 0;
  for (const HfArchitecture& a : hf_architectures()) {
    EXPECT_EQ(&hf_architecture(a.architecture), &a);
    const auto type = enum_from_name<partition::ModelType>(a.cleave_type);
    ASSERT_TRUE(type.has_value()) << a.class_name << " maps to model.type " << a.cleave_type << ", not a family";
    config::RunConfig c;
    c.model.type = *type;
    // The llama rows hold a llama without a window or biases (Llama), with a window (Mistral), with biases (Qwen2).
    if (a.architecture == Architecture::kMistral) c.model.llama.sliding_window = 4;
    if (a.architecture == Architecture::kQwen2) c.model.llama.qkv_bias = true;
    // ... with q/k norms (Qwen3); the moe rows without (Mixtral) and with them (Qwen3-MoE).
    if (a.architecture == Architecture::kQwen3) c.model.llama.qk_norm = true;
    if (a.architecture == Architecture::kQwen3Moe) c.model.moe.qk_norm = true;
    // ... and with q/k/v biases and a sigmoid-gated shared expert (Qwen2-MoE).
    if (a.architecture == Architecture::kQwen2Moe) {
      c.model.moe.qkv_bias = true;
      c.model.moe.n_shared_experts = 2;
      c.model.moe.shared_expert_gate = true;
    }
    const json model = json::parse(config::to_json(c)).at("model");
    const json hf = hf_config_json(model, "float32");
    EXPECT_EQ(hf.at("architectures").at(0).get<std::string>(), a.class_name);
    EXPECT_EQ(hf.at("model_type").get<std::string>(), a.model_type);
    const HfModelConfig back = read_hf_config(hf, "config.json");
    EXPECT_EQ(back.dims.architecture, a.architecture);
    EXPECT_EQ(back.model, model) << a.class_name;
    const ModelDims dims = dims_of_model(model, "test");
    EXPECT_EQ(dims.ffn, back.dims.ffn);
    EXPECT_EQ(dims.n_kv_heads, back.dims.n_kv_heads);
    // The token table is one of the map's tensors, named as the row says.
    bool has_embedding = false;
    for (const TensorMap& m : tensor_map(dims)) has_embedding = has_embedding || m.hf_name == a.embedding;
    EXPECT_TRUE(has_embedding) << a.class_name;
    EXPECT_EQ(a.canonical_name(std::string(a.embedding)), a.embedding);
    ++rows;
  }
  EXPECT_EQ(rows, 8);
}

TEST(HfArchitectureTable, RefusalsNameEveryRow) {
  const std::string unknown = error_of([] { read_hf_config(json{{"architectures", {"BertModel"}}}, "config.json"); });
  EXPECT_NE(unknown.find("cleave imports GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                         "MixtralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM and Qwen2MoeForCausalLM"), std::string::npos)
      << unknown;
  const std::string mlp = error_of([] { dims_of_model(json{{"type", "mlp"}}, "ckpt"); });
  EXPECT_NE(mlp.find("(gpt exports as GPT2LMHeadModel, llama as LlamaForCausalLM, llama as MistralForCausalLM (with a sliding "
                      "window), llama as Qwen2ForCausalLM (with q/k/v biases), moe as MixtralForCausalLM, llama as "
                      "Qwen3ForCausalLM (with q/k norms), moe as Qwen3MoeForCausalLM (with q/k norms), moe as Qwen2MoeForCausalLM "
                      "(with a gated shared expert))"),
            std::string::npos) << mlp;
}

}  // namespace
}  // namespace cleave::hf::hf_architecture_test
