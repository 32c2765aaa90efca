// The family table at the layers' level (layers/families/family_layers.hpp): every block kind a family owns
// has a layer builder, and build_blocks builds every family's whole default model, one layer per block, with
// the parameter count the cost model predicts (the tied table once), at tp 1 and, for the families that split,
// on each tp rank (whose shards sum to the whole); and the family table's list of a block's parameter tensors
// (partition/param_tensors.hpp, what the memory plan's ZeRO units are laid out from) is the built layer's, tensor by
// tensor on every tp rank, with every optional tensor and on sizes no tensor of which is a multiple of 16.
#include <gtest/gtest.h>

#include <string>

#include "layers/families/family_layers.hpp"
#include "layers/models/builder.hpp"
#include "../layer_test_util.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"
#include "partition/param_tensors.hpp"

namespace cleave::layers::family_layers_test {
namespace {

using testing::on_host;

std::int64_t param_elements(const std::vector<LayerPtr>& layers) {
  std::int64_t n = 0;
  for (const auto& p : collect_params(layers)) n += p->value.numel();
  return n;
}

TEST(FamilyLayers, EveryFamilyOwnedKindHasABuilder) {
  int owned = 0;
  for (const auto& entry : enum_names(partition::BlockKind{})) {
    const bool family_owned = partition::family_block_rules(entry.value) != nullptr;
    const BlockLayers* row = family_block_layers(entry.value);
    EXPECT_EQ(row != nullptr, family_owned) << entry.name;
    if (row != nullptr) {
      EXPECT_EQ(row->kind, entry.value);
      ++owned;
    }
  }
  EXPECT_EQ(owned, 3);
}

TEST(FamilyLayers, EveryFamilyBuildsItsWholeModel) {
  for (const partition::Family& f : partition::families()) {
    const partition::ModelSpec spec = f.make_spec(partition::FamilyConfigs{});
    const std::size_t n = spec.blocks.size();
    const auto layers = build_blocks(spec, 0, n, on_host());
    ASSERT_EQ(layers.size(), n) << f.name;
    const std::int64_t expected = partition::unique_param_count(spec, 0, n);
    EXPECT_EQ(param_elements(layers), expected) << f.name;
    EXPECT_GT(expected, 0) << f.name;
  }
}

TEST(FamilyLayers, TensorParallelRanksHoldShardsOfTheFamilyBlock) {
  for (const partition::Family& f : partition::families()) {
    if (f.check_tensor_parallel == nullptr) continue;
    const partition::ModelSpec spec = f.make_spec(partition::FamilyConfigs{});
    std::size_t block = spec.blocks.size();
    for (std::size_t i = 0; i < spec.blocks.size(); ++i) {
      if (partition::is_repeated_layer(spec.blocks[i].kind)) {
        block = i;
        break;
      }
    }
    ASSERT_LT(block, spec.blocks.size()) << f.name << " has no repeated layer";
    const std::int64_t whole = param_elements(build_blocks(spec, block, block + 1, on_host()));
    std::int64_t sharded = 0;
    for (int rank = 0; rank < 2; ++rank) {
      BuildOptions options{cpu_allocator()};
      options.tp_size = 2;
      options.tp_rank = rank;
      const auto layers = build_blocks(spec, block, block + 1, options);
      ASSERT_EQ(layers.size(), 1u);
      for (const auto& p : collect_params(layers)) {
        // Replicated parameters (norm weights, row-parallel biases) count once; shards sum to the whole.
        sharded += p->shard.parts > 1 ? p->value.numel() : (rank == 0 ? p->value.numel() : 0);
      }
    }
    EXPECT_EQ(sharded, whole) << f.name;
  }
}

// Every family, with its optional tensors (Qwen2's q/k/v biases, Qwen3's q/k norms, a sigmoid router's bias, shared
// experts and their gate, an untied head) and awkward sizes: d_model 24 (a norm of 24 elements), vocabulary 50 (25
// table rows per tp rank), gpt's qkv bias 36 per rank.
std::vector<partition::ModelSpec> param_tensor_models() {
  std::vector<partition::ModelSpec> specs;
  for (const partition::Family& f : partition::families()) specs.push_back(f.make_spec(partition::FamilyConfigs{}));
  partition::FamilyConfigs gpt;
  gpt.gpt = {.vocab_size = 50, .d_model = 24, .n_layers = 2, .n_heads = 2, .seq_len = 12, .d_ff = 0,
             .tie_embeddings = false};
  specs.push_back(partition::make_model_spec(partition::ModelType::kGpt, gpt));
  partition::FamilyConfigs llama;
  llama.llama.vocab_size = 50;
  llama.llama.d_model = 24;
  llama.llama.n_heads = 4;
  llama.llama.n_kv_heads = 2;
  llama.llama.ffn_hidden_size = 36;
  llama.llama.qkv_bias = true;
  llama.llama.qk_norm = true;
  llama.llama.tie_embeddings = true;
  specs.push_back(partition::make_model_spec(partition::ModelType::kLlama, llama));
  partition::FamilyConfigs moe;
  moe.moe.vocab_size = 50;
  moe.moe.d_model = 24;
  moe.moe.n_heads = 2;
  moe.moe.n_kv_heads = 2;
  moe.moe.ffn_hidden_size = 10;
  moe.moe.n_shared_experts = 1;
  moe.moe.shared_expert_gate = true;
  moe.moe.router = partition::RouterKind::kSigmoid;
  moe.moe.qk_norm = true;
  specs.push_back(partition::make_model_spec(partition::ModelType::kMoe, moe));
  return specs;
}

TEST(FamilyLayers, ParamTensorsAreTheBuiltLayersTensorByTensor) {
  std::int64_t unaligned = 0;  // tensors whose numel is not a multiple of 16 (the test's point)
  for (const partition::ModelSpec& spec : param_tensor_models()) {
    const bool splits = partition::family(spec.type).check_tensor_parallel != nullptr;
    for (std::size_t i = 0; i < spec.blocks.size(); ++i) {
      const partition::BlockSpec& b = spec.blocks[i];
      for (int tp : {1, 2}) {
        if (tp > 1 && !splits) continue;
        for (int rank = 0; rank < tp; ++rank) {
          SCOPED_TRACE(std::string(partition::family(spec.type).name) + " " + b.name + " tp " + std::to_string(tp) +
                       " rank " + std::to_string(rank));
          BuildOptions options{cpu_allocator()};
          options.tp_size = tp;
          options.tp_rank = rank;
          const auto params = collect_params(build_blocks(spec, i, i + 1, options));
          const std::vector<partition::ParamTensor> listed = partition::block_param_tensors(b, tp);
          ASSERT_EQ(listed.size(), params.size());
          for (std::size_t k = 0; k < params.size(); ++k) {
            const std::string& name = params[k]->name;
            EXPECT_EQ(listed[k].numel, params[k]->value.numel()) << name;
            const bool table = name.ends_with(".token") || b.kind == partition::BlockKind::kLmHead;
            EXPECT_EQ(listed[k].role == partition::ParamRole::kTokenTable, table) << name;
            const bool experts = name.find(".experts.") != std::string::npos;
            EXPECT_EQ(listed[k].role == partition::ParamRole::kRoutedExperts, experts) << name;
            unaligned += listed[k].numel % 16 != 0 ? 1 : 0;
          }
        }
      }
    }
  }
  EXPECT_GT(unaligned, 0);
}

}  // namespace
}  // namespace cleave::layers::family_layers_test
