// The model-family table (partition/families/family.hpp): every model.type has its row and every row keeps the
// table's invariants (the spec it builds is its own type, chained, costed by the cost model at every layout the
// family admits; token and classifier sizes agree with the spec; Family::resolve fills what the spec fills);
// the messages list the families from the table; and no generic source file switches on a family (the design
// rule of docs/architecture.md "Model families", checked over the tree).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"
#include "partition/tp_rules.hpp"
#include "support/error_of.hpp"

namespace cleave::partition::family_test {
namespace {

namespace fs = std::filesystem;

using cleave::testing::error_of;

TEST(FamilyTable, EveryModelTypeHasItsRowAndBuildsItsOwnSpec) {
  int rows = 0;
  for (const auto& entry : enum_names(ModelType{})) {
    const Family& f = family(entry.value);
    EXPECT_EQ(f.type, entry.value);
    EXPECT_EQ(f.name, entry.name);
    const ModelSpec spec = make_model_spec(entry.value, FamilyConfigs{});
    EXPECT_EQ(spec.type, entry.value) << f.name;
    ASSERT_GE(spec.blocks.size(), 2u) << f.name;
    for (std::size_t i = 1; i < spec.blocks.size(); ++i) {
      EXPECT_EQ(spec.blocks[i - 1].output, spec.blocks[i].input) << f.name << " between blocks " << i - 1 << ", " << i;
    }
    EXPECT_EQ(spec.blocks.back().kind, BlockKind::kSoftmaxCrossEntropy) << f.name;
    EXPECT_EQ(is_language_model(entry.value), f.language_model);
    if (f.language_model) {
      const TokenSizes t = spec.token_sizes();
      EXPECT_EQ(spec.sample_input(), Shape{t.seq_len}) << f.name;
      EXPECT_EQ(spec.blocks.back().vocab_size, t.vocab_size) << f.name;
      EXPECT_EQ(spec.items_per_sample(), t.seq_len) << f.name;
    }
    if (f.classifier != nullptr) {
      const Family::ClassifierSizes c = f.classifier(spec);
      EXPECT_EQ(c.sample, spec.sample_input()) << f.name;
      EXPECT_EQ(c.classes, spec.blocks.back().input.last()) << f.name;
    }
    EXPECT_TRUE(f.language_model || f.classifier != nullptr) << f.name << " has no data it can train on";
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(families().size()));
}

// Every block of every family's spec is costed (a family-owned kind through its BlockRules) at every layout the
// family admits, and the per-block figures are positive where they must be.
TEST(FamilyTable, EveryBlockIsCostedAtEveryLayoutItsFamilyAdmits) {
  for (const Family& f : families()) {
    const ModelSpec spec = f.make_spec(FamilyConfigs{});
    std::vector<int> tps = {1};
    if (f.tp_sizes != nullptr) {
      for (auto t : f.tp_sizes(spec)) {
        if (t > 1) tps.push_back(static_cast<int>(t));
      }
      EXPECT_GT(tps.size(), 1u) << f.name << "'s default config admits no tp > 1";
    }
    for (int tp : tps) {
      check_tensor_parallel(spec, tp);
      for (bool sp : {false, true}) {
        if (sp && !(f.sequence_parallel && tp > 1)) continue;
        for (const BlockSpec& b : spec.blocks) {
          const BlockCost c = block_cost(b, DType::kF32, Recompute::kNone, tp, sp);
          EXPECT_GE(c.activation_bytes, 0) << f.name << " " << b.name;
          const BlockWork w = block_work(b, DType::kF32, Recompute::kNone, tp, 2);
          EXPECT_GE(w.forward.gemm_flops(), 0.0) << f.name << " " << b.name;
          const BlockRules* rules = family_block_rules(b.kind);
          if (rules != nullptr) {
            EXPECT_EQ(rules->kind, b.kind);
            EXPECT_GT(c.forward_flops, 0.0) << f.name << " " << b.name;
            EXPECT_GT(c.param_count, 0) << f.name << " " << b.name;
            EXPECT_NE(rules->shape_key(b).find(block_kind_name(b.kind)), std::string::npos);
            if (sp) {
              EXPECT_EQ(tp_block_output(b, tp, true), b.output.with_dim(0, b.output[0] / tp));
            }
          }
        }
      }
    }
  }
}

TEST(FamilyTable, RepeatedLayersAreTheFamiliesOwnBlocks) {
  EXPECT_TRUE(is_repeated_layer(BlockKind::kTransformerBlock));
  EXPECT_TRUE(is_repeated_layer(BlockKind::kLlamaBlock));
  for (BlockKind common : {BlockKind::kEmbedding, BlockKind::kLayerNorm, BlockKind::kRmsNorm, BlockKind::kLmHead,
                           BlockKind::kLinear, BlockKind::kSoftmaxCrossEntropy}) {
    EXPECT_EQ(family_block_rules(common), nullptr) << block_kind_name(common);
    EXPECT_FALSE(is_repeated_layer(common));
  }
}

// Family::resolve fills exactly what the spec builder resolves, so config.json (written resolved) and the spec
// agree.
TEST(FamilyTable, ResolveFillsWhatTheSpecResolves) {
  FamilyConfigs c;
  c.gpt.d_model = 48;
  c.gpt.n_heads = 4;
  c.gpt.d_ff = 0;
  c.llama.d_model = 96;
  c.llama.n_heads = 6;
  c.llama.n_kv_heads = 0;
  c.llama.ffn_hidden_size = 0;
  for (ModelType t : {ModelType::kGpt, ModelType::kLlama}) {
    FamilyConfigs resolved = c;
    family(t).resolve(resolved);
    const ModelSpec spec = make_model_spec(t, c);
    EXPECT_EQ(spec.token_sizes().d_ff, make_model_spec(t, resolved).token_sizes().d_ff);
    EXPECT_GT(make_model_spec(t, resolved).token_sizes().d_ff, 0);
  }
  FamilyConfigs g = c;
  family(ModelType::kGpt).resolve(g);
  EXPECT_EQ(g.gpt.d_ff, 4 * 48);
  FamilyConfigs l = c;
  family(ModelType::kLlama).resolve(l);
  EXPECT_EQ(l.llama.n_kv_heads, 6);
  EXPECT_EQ(l.llama.ffn_hidden_size, llama_ffn_hidden_size(96));
}

TEST(FamilyTable, MessagesNameTheFamiliesFromTheTable) {
  const auto can_split = [](const Family& f) { return f.check_tensor_parallel != nullptr; };
  EXPECT_EQ(family_names(can_split, "or"), "gpt, llama or moe");
  EXPECT_EQ(family_names(can_split, "and", true), "\"gpt\", \"llama\" and \"moe\"");
  EXPECT_EQ(family_names([](const Family&) { return true; }, "or"), "gpt, mlp, cnn, llama or moe");
  const std::string refusal = error_of([] { check_tensor_parallel(make_mlp_spec(MlpConfig{}), 2); });
  EXPECT_NE(refusal.find("needs a gpt, llama or moe model"), std::string::npos) << refusal;
  const std::string sp = error_of([] { check_sequence_parallel(make_cnn_spec(CnnConfig{}), 2, true); });
  EXPECT_NE(sp.find("needs a gpt, llama or moe model (got model.type cnn)"), std::string::npos) << sp;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ("BlockKind::", "transformer_block") -> "BlockKind::kTransformerBlock".
std::string enumerator(std::string_view scope, std::string_view name) {
  std::string out(scope);
  out += 'k';
  bool upper = true;
  for (char ch : name) {
    if (ch == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    upper = false;
  }
  return out;
}

// The design rule: outside a family's home and the tables, no source names a ModelType value, a family-owned
// BlockKind or a Hugging Face Architecture (a default member value like `= ModelType::kGpt;` aside). A new switch on a family fails here with the
// file and line.
TEST(FamilySites, NoGenericSourceSwitchesOnAFamily) {
  const fs::path root = fs::path(CLEAVE_SOURCE_DIR);
  std::vector<std::string> names;
  for (const auto& entry : enum_names(ModelType{})) {
    names.push_back(enumerator("ModelType::", entry.name));
  }
  for (const auto& entry : enum_names(BlockKind{})) {
    if (family_block_rules(entry.value) != nullptr) names.push_back(enumerator("BlockKind::", entry.name));
  }
  ASSERT_EQ(names.back(), "BlockKind::kMoeBlock");
  names.push_back("Architecture::k");  // engine/hf's key (GPT2LMHeadModel, LlamaForCausalLM)
  const std::vector<std::string> homes = {"partition/families/", "layers/families/", "layers/llama/", "layers/moe/",
                                          "engine/config/fields.hpp", "engine/hf/families/"};
  int scanned = 0;
  for (const char* dir : {"engine", "layers", "partition", "pipeline", "kernels"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string rel = entry.path().lexically_relative(root).generic_string();
      bool home = false;
      for (const auto& h : homes) home = home || rel.rfind(h, 0) == 0;
      if (home) continue;
      ++scanned;
      std::istringstream text(read_text(entry.path()));
      std::string line;
      for (int number = 1; std::getline(text, line); ++number) {
        if (line.find("= ModelType::kGpt;") != std::string::npos) continue;  // default values
        if (line.find("= Architecture::kGpt2;") != std::string::npos) continue;
        for (const auto& name : names) {
          EXPECT_EQ(line.find(name), std::string::npos)
              << rel << ":" << number << " names " << name << " outside the family's home: ask the family table "
              << "(partition/families/family.hpp, layers/families/family_layers.hpp)";
        }
      }
    }
  }
  EXPECT_GT(scanned, 100);
}

}  // namespace
}  // namespace cleave::partition::family_test
