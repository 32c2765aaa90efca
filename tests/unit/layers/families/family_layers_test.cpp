// The family table at the layers' level (layers/families/family_layers.hpp): every block kind a family owns
// has a layer builder, and build_blocks builds every family's whole default model, one layer per block, with
// the parameter count the cost model predicts (the tied table once), at tp 1 and, for the families that split,
// on each tp rank (whose shards sum to the whole).
#include <gtest/gtest.h>

#include "layers/families/family_layers.hpp"
#include "layers/models/builder.hpp"
#include "../layer_test_util.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::layers {
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

}  // namespace
}  // namespace cleave::layers
