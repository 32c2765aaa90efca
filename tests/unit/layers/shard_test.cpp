// Shard rules without communication: the layout helpers (shard_of / place_shard against hand-written
// slices, round trips, every element covered once, padding), slice-exact sharded initialisation (every
// tp rank's shard of a tp build equals, bit for bit, the slice of the tp = 1 build, for every parameter of
// a gpt), and the tensor-parallel layout errors with their messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "engine/core/error.hpp"
#include "layers/models/builder.hpp"
#include "layer_test_util.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/sharded_param.hpp"
#include "layers/parallel/tp_layout.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers::shard_test {
namespace {

using testing::on_host;

std::vector<float> iota_values(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 1.0f);  // 1-based: a zero in a shard is always padding
  return v;
}

TEST(Shard, HandWrittenSlices) {
  const auto logical = iota_values(12);  // [6, 2]: row i holds {2i+1, 2i+2}
  // Rows split in 2: rank 1 holds rows 3..5.
  EXPECT_EQ(shard_of(logical, make_shard_spec(Shape{6, 2}, 0, 2, 1)),
            (std::vector<float>{7, 8, 9, 10, 11, 12}));
  // Columns split in 2: rank 0 holds column 0.
  EXPECT_EQ(shard_of(logical, make_shard_spec(Shape{6, 2}, 1, 2, 0)), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  // 3 groups (q|k|v of 2 rows each) split in 2: rank 1 holds rows 1, 3, 5.
  EXPECT_EQ(shard_of(logical, make_shard_spec(Shape{6, 2}, 0, 2, 1, 3)),
            (std::vector<float>{3, 4, 7, 8, 11, 12}));
  // A 1-D bias [6] in 3 groups split in 2: rank 0 holds elements 0, 2, 4.
  EXPECT_EQ(shard_of(iota_values(6), make_shard_spec(Shape{6}, 0, 2, 0, 3)), (std::vector<float>{1, 3, 5}));
  // 5 rows over 2 ranks: 3 rows each, rank 1's last row is padding (0).
  const auto five = iota_values(10);
  const ShardSpec padded = make_shard_spec(Shape{5, 2}, 0, 2, 1);
  EXPECT_EQ(shard_shape(padded), (Shape{3, 2}));
  EXPECT_EQ(shard_rows(padded), 3);
  EXPECT_EQ(shard_of(five, padded), (std::vector<float>{7, 8, 9, 10, 0, 0}));
  // Replicated: the whole tensor.
  EXPECT_EQ(shard_of(logical, replicated_spec(Shape{6, 2})), logical);
}

TEST(Shard, EveryRankTogetherRebuildsTheLogicalTensor) {
  struct Case {
    Shape logical;
    int dim, parts, groups;
  };
  const std::vector<Case> cases = {
      {Shape{12, 5}, 0, 4, 1},  {Shape{12, 5}, 0, 2, 3}, {Shape{5, 12}, 1, 4, 1}, {Shape{3, 8, 5}, 1, 4, 2},
      {Shape{37, 6}, 0, 4, 1},  {Shape{37, 6}, 0, 2, 1}, {Shape{3, 4}, 0, 4, 1},  {Shape{2, 3}, 0, 4, 1},
      {Shape{7, 9, 2}, 2, 2, 1}, {Shape{37}, 0, 3, 1},
  };
  for (const Case& c : cases) {
    const auto logical = iota_values(c.logical.numel());
    std::vector<float> rebuilt;
    std::vector<int> covered(logical.size(), 0);
    std::int64_t real = 0;
    for (int r = 0; r < c.parts; ++r) {
      const ShardSpec spec = make_shard_spec(c.logical, c.dim, c.parts, r, c.groups);
      const auto shard = shard_of(logical, spec);
      ASSERT_EQ(static_cast<std::int64_t>(shard.size()), shard_shape(spec).numel());
      for (float v : shard) real += v != 0.0f ? 1 : 0;
      place_shard(rebuilt, shard, spec);
      for_each_shard_run(spec, [&](std::int64_t from, std::int64_t to, std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i) {
          ++covered[static_cast<std::size_t>(from + i)];
          EXPECT_EQ(shard[static_cast<std::size_t>(to + i)], logical[static_cast<std::size_t>(from + i)]);
        }
      });
    }
    EXPECT_EQ(rebuilt, logical) << c.logical.str() << " dim " << c.dim << " parts " << c.parts;
    EXPECT_EQ(real, c.logical.numel()) << "real (non-padding) elements over all shards";
    for (int n : covered) EXPECT_EQ(n, 1) << c.logical.str() << ": every element belongs to exactly one shard";
  }
}

TEST(Shard, RejectsBadSpecsAndSizes) {
  EXPECT_THROW(make_shard_spec(Shape{6, 2}, 2, 2, 0), Error);     // dim outside the shape
  EXPECT_THROW(make_shard_spec(Shape{6, 2}, 0, 2, 2), Error);     // index >= parts
  EXPECT_THROW(make_shard_spec(Shape{6, 2}, 0, 0, 0), Error);     // parts < 1
  EXPECT_THROW(make_shard_spec(Shape{6, 2}, 0, 2, 0, 4), Error);  // groups do not divide 6
  const ShardSpec spec = make_shard_spec(Shape{6, 2}, 0, 2, 0);
  EXPECT_THROW(shard_of(iota_values(11), spec), Error);
  std::vector<float> logical;
  EXPECT_THROW(place_shard(logical, iota_values(5), spec), Error);
  std::vector<float> wrong(5);
  EXPECT_THROW(place_shard(wrong, iota_values(6), spec), Error);
}

// ep × tp (ShardSpec::ep_parts): an expert tensor [E, F, D] split over tp along F, each ep rank keeping E / ep of
// its tp shard's experts. Against a hand-written slice, and every (ep, tp) piece together rebuilds the tensor once.
TEST(Shard, ExpertSplitOfATensorParallelShard) {
  const Shape logical{4, 6, 2};  // E 4, F 6, D 2
  const auto values = iota_values(logical.numel());
  const ShardSpec spec = with_expert_split(make_shard_spec(logical, 1, 2, 1), 2, 1);  // tp rank 1, ep rank 1
  EXPECT_EQ(shard_shape(spec), (Shape{2, 3, 2}));
  EXPECT_EQ(expert_split_offset(spec), 2 * 3 * 2);
  std::vector<float> want;
  for (int e = 2; e < 4; ++e) {
    for (int f = 3; f < 6; ++f) {
      for (int d = 0; d < 2; ++d) want.push_back(values[static_cast<std::size_t>((e * 6 + f) * 2 + d)]);
    }
  }
  EXPECT_EQ(shard_of(values, spec), want);
  for (int dim : {1, 2}) {  // gate/up split along F (dim 1), down along its F (dim 2)
    std::vector<float> rebuilt;
    std::vector<int> seen(static_cast<std::size_t>(logical.numel()), 0);
    for (int tp = 0; tp < 2; ++tp) {
      for (int ep = 0; ep < 2; ++ep) {
        const ShardSpec s = with_expert_split(make_shard_spec(logical, dim, 2, tp), 2, ep);
        place_shard(rebuilt, shard_of(values, s), s);
        for_each_shard_run(s, [&](std::int64_t at, std::int64_t, std::int64_t n) {
          for (std::int64_t i = 0; i < n; ++i) ++seen[static_cast<std::size_t>(at + i)];
        });
      }
    }
    EXPECT_EQ(rebuilt, values) << "dim " << dim;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), logical.numel()) << "dim " << dim;
  }
  EXPECT_THROW(with_expert_split(make_shard_spec(logical, 0, 2, 0), 2, 0), Error);  // tp along dim 0
  EXPECT_THROW(with_expert_split(make_shard_spec(logical, 1, 2, 0), 3, 0), Error);  // 3 does not divide 4
  EXPECT_THROW(with_expert_split(make_shard_spec(logical, 1, 2, 0), 2, 2), Error);  // ep index out of range
}

TEST(Shard, CountedOnceAcrossTheTpGroup) {
  EXPECT_TRUE(counted_on_tp_rank(make_shard_spec(Shape{4, 2}, 0, 2, 1), 1));
  EXPECT_TRUE(counted_on_tp_rank(replicated_spec(Shape{4}), 0));
  EXPECT_FALSE(counted_on_tp_rank(replicated_spec(Shape{4}), 1));
}

TEST(ShardedInit, ShardEqualsTheSliceOfTheLogicalParamBitForBit) {
  for (InitScheme scheme : {InitScheme::kGpt2, InitScheme::kTorchDefault}) {
    ParamInit init{cpu_allocator()};
    init.scheme = scheme;
    init.seed = 77;
    init.std = 0.03f;
    auto logical = make_param("x.weight", Shape{37, 6}, true, init.allocator);
    init_weight(*logical, 6, init);
    auto bias = make_param("x.bias", Shape{12}, false, init.allocator);
    init_bias(*bias, 5, init);
    for (int parts : {1, 2, 3, 4}) {
      for (int r = 0; r < parts; ++r) {
        for (int dim : {0, 1}) {
          if (dim == 1 && 6 % parts != 0) continue;
          const ShardSpec spec = make_shard_spec(Shape{37, 6}, dim, parts, r);
          auto shard = make_sharded_param("x.weight", spec, true, init.allocator);
          init_shard_weight(*shard, 6, init);
          EXPECT_EQ(shard->value.to_floats(), shard_of(logical->value.to_floats(), spec))
              << "dim " << dim << " rank " << r << " of " << parts;
        }
        if (12 % (3 * parts) == 0) {
          const ShardSpec spec = make_shard_spec(Shape{12}, 0, parts, r, 3);
          auto shard = make_sharded_param("x.bias", spec, false, init.allocator);
          init_shard_bias(*shard, 5, init);
          EXPECT_EQ(shard->value.to_floats(), shard_of(bias->value.to_floats(), spec));
        }
      }
    }
  }
}

partition::ModelSpec tiny_gpt(bool tied, std::int64_t vocab = 37, std::int64_t heads = 4) {
  partition::GptConfig c;
  c.vocab_size = vocab;
  c.d_model = 24;
  c.n_layers = 2;
  c.n_heads = heads;
  c.seq_len = 9;
  c.tie_embeddings = tied;
  return partition::make_gpt_spec(c);
}

TEST(ShardedInit, TensorParallelGptBuildIsASliceOfTheSingleRankBuild) {
  for (bool tied : {true, false}) {
    const auto spec = tiny_gpt(tied);
    auto reference_layers = build_blocks(spec, 0, spec.blocks.size(), on_host());
    std::map<std::string, std::shared_ptr<Param>> reference;
    for (auto& p : collect_params(reference_layers)) reference[p->name] = p;
    for (int tp : {2, 4}) {
      std::map<std::string, std::vector<float>> rebuilt;
      for (int r = 0; r < tp; ++r) {
        BuildOptions options{cpu_allocator()};
        options.tp_size = tp;
        options.tp_rank = r;
        auto layers = build_blocks(spec, 0, spec.blocks.size(), options);
        EXPECT_EQ(layers[0]->kind(), "vocab_parallel_embedding");
        EXPECT_EQ(layers[1]->kind(), "parallel_transformer_block");
        EXPECT_EQ(layers[3]->kind(), "layernorm");
        EXPECT_EQ(layers[4]->kind(), "vocab_parallel_lm_head");
        EXPECT_EQ(layers[5]->kind(), "vocab_parallel_cross_entropy");
        const auto params = collect_params(layers);
        ASSERT_EQ(params.size(), reference.size()) << "same parameters, same names";
        for (const auto& p : params) {
          ASSERT_TRUE(reference.count(p->name)) << p->name;
          const Param& ref = *reference[p->name];
          EXPECT_EQ(p->shard.logical, ref.value.shape()) << p->name;
          EXPECT_EQ(p->value.shape(), shard_shape(p->shard)) << p->name;
          EXPECT_EQ(p->weight_decay, ref.weight_decay) << p->name;
          EXPECT_EQ(p->value.to_floats(), shard_of(ref.value.to_floats(), p->shard)) << p->name << " rank " << r;
          for (float g : p->grad.to_floats()) ASSERT_EQ(g, 0.0f);
          place_shard(rebuilt[p->name], p->value.to_floats(), p->shard);
        }
        // The documented split of each kind of parameter.
        std::map<std::string, ShardSpec> by_name;
        for (const auto& p : params) by_name[p->name] = p->shard;
        EXPECT_EQ(by_name["embed.token"].dim, 0);
        EXPECT_EQ(by_name["embed.position"].dim, -1);
        EXPECT_EQ(by_name["blocks.0.attn.qkv.weight"].dim, 0);
        EXPECT_EQ(by_name["blocks.0.attn.qkv.weight"].groups, 3);
        EXPECT_EQ(by_name["blocks.0.attn.qkv.bias"].groups, 3);
        EXPECT_EQ(by_name["blocks.0.attn.proj.weight"].dim, 1);
        EXPECT_EQ(by_name["blocks.0.attn.proj.bias"].dim, -1);
        EXPECT_EQ(by_name["blocks.1.mlp.fc.weight"].dim, 0);
        EXPECT_EQ(by_name["blocks.1.mlp.fc.bias"].dim, 0);
        EXPECT_EQ(by_name["blocks.1.mlp.proj.weight"].dim, 1);
        EXPECT_EQ(by_name["blocks.1.ln2.weight"].dim, -1);
        EXPECT_EQ(by_name["final_norm.bias"].dim, -1);
        for (const auto& [name, s] : by_name) {
          if (s.dim >= 0) {
            EXPECT_TRUE(s.parts == tp && s.index == r) << name;
          }
        }
        if (!tied) {
          EXPECT_EQ(by_name["head.weight"].dim, 0);
        }
      }
      for (const auto& [name, values] : rebuilt) {
        EXPECT_EQ(values, reference[name]->value.to_floats()) << name << ": the shards of all ranks rebuild it";
      }
    }
  }
}

TEST(ShardedInit, TiedHeadSharesTheEmbeddingShardOrCopiesItAcrossRanges) {
  const auto spec = tiny_gpt(true);
  const std::size_t head = 4;
  BuildOptions options{cpu_allocator()};
  options.tp_size = 2;
  options.tp_rank = 1;
  auto whole = build_blocks(spec, 0, spec.blocks.size(), options);
  EXPECT_EQ(whole[0]->params()[0].get(), whole[head]->params()[0].get()) << "one shared Param in one range";
  auto first = build_blocks(spec, 0, 2, options);
  auto last = build_blocks(spec, 2, spec.blocks.size(), options);
  const auto copy = last[head - 2]->params()[0];
  EXPECT_EQ(copy->name, "embed.token");
  EXPECT_NE(copy.get(), first[0]->params()[0].get());
  EXPECT_EQ(copy->value.to_floats(), first[0]->params()[0]->value.to_floats());
  options.tied_table = first[0]->params()[0];
  auto shared = build_blocks(spec, 2, spec.blocks.size(), options);
  EXPECT_EQ(shared[head - 2]->params()[0].get(), first[0]->params()[0].get());
  options.tp_rank = 0;  // a table of the other rank must be refused
  EXPECT_THROW(build_blocks(spec, 2, spec.blocks.size(), options), Error);
}

std::string build_error(const partition::ModelSpec& spec, int tp) {
  BuildOptions options{cpu_allocator()};
  options.tp_size = tp;
  try {
    build_blocks(spec, 0, spec.blocks.size(), options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TpLayout, ErrorsSayWhichSizesWork) {
  EXPECT_EQ(build_error(tiny_gpt(true, 37, 6), 4),
            "model.n_heads: 6 is not divisible by parallel.tensor_model_parallel_size 4: each tp rank needs whole "
            "attention heads; use tp in {1, 2, 3, 6}");
  EXPECT_EQ(build_error(tiny_gpt(true, 37, 4), 8),
            "parallel.tensor_model_parallel_size: 8 is larger than model.n_heads 4: each tp rank needs at least "
            "one attention head; use tp in {1, 2, 4}");
  partition::GptConfig c;
  c.d_model = 24;
  c.n_heads = 4;
  c.d_ff = 30;
  EXPECT_EQ(build_error(partition::make_gpt_spec(c), 4),
            "model.d_ff: 30 is not divisible by parallel.tensor_model_parallel_size 4: each tp rank holds d_ff / "
            "tp MLP columns; use tp in {1, 2}");
  const std::string mlp = build_error(partition::make_mlp_spec({}), 2);
  EXPECT_NE(mlp.find("tensor parallelism supports model.type gpt"), std::string::npos) << mlp;
  EXPECT_NE(build_error(partition::make_cnn_spec({}), 2).find("model.type cnn"), std::string::npos);
  EXPECT_NE(build_error(tiny_gpt(true), 0).find(">= 1"), std::string::npos);
  BuildOptions bad_rank{cpu_allocator()};
  bad_rank.tp_size = 2;
  bad_rank.tp_rank = 2;
  EXPECT_THROW(build_blocks(tiny_gpt(true), 0, 6, bad_rank), Error);
  // Any vocabulary works (it is padded), including one smaller than tp.
  EXPECT_EQ(build_error(tiny_gpt(true, 3, 4), 4), "");
  EXPECT_EQ(allowed_tp_sizes(12, 48), (std::vector<std::int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(allowed_tp_sizes(6, 0), (std::vector<std::int64_t>{1, 2, 3, 6}));
}

TEST(TpLayout, BoundaryShapesOnOneTpRank) {
  const auto spec = tiny_gpt(true);  // vocab 37, seq 9, d_model 24
  for (const auto& block : spec.blocks) {
    EXPECT_EQ(tp_block_input(block, 1), block.input);
    EXPECT_EQ(tp_block_output(block, 1), block.output);
  }
  EXPECT_EQ(tp_block_output(spec.blocks[4], 4), (Shape{9, 10}));  // lm head: ceil(37 / 4) local logits
  EXPECT_EQ(tp_block_input(spec.blocks[5], 4), (Shape{9, 10}));   // loss
  EXPECT_EQ(tp_block_input(spec.blocks[4], 4), (Shape{9, 24}));
  EXPECT_EQ(tp_block_output(spec.blocks[1], 4), (Shape{9, 24}));
  EXPECT_EQ(tp_block_input(spec.blocks[0], 2), (Shape{9}));
}

// Sequence parallelism: the residual stream (embedding output up to the lm head's input) is [T / tp, D] on
// each tp rank; the logits and the token ids are not split along the sequence.
TEST(TpLayout, SequenceParallelBoundaryShapes) {
  partition::GptConfig c;
  c.vocab_size = 37;
  c.d_model = 24;
  c.n_layers = 2;
  c.seq_len = 12;
  const auto spec = partition::make_gpt_spec(c);  // embed, 2 blocks, final norm, head, loss
  EXPECT_EQ(tp_block_input(spec.blocks[0], 4, true), (Shape{12}));
  EXPECT_EQ(tp_block_output(spec.blocks[0], 4, true), (Shape{3, 24}));
  for (int b : {1, 2, 3}) {
    EXPECT_EQ(tp_block_input(spec.blocks[static_cast<std::size_t>(b)], 4, true), (Shape{3, 24})) << b;
    EXPECT_EQ(tp_block_output(spec.blocks[static_cast<std::size_t>(b)], 4, true), (Shape{3, 24})) << b;
  }
  EXPECT_EQ(tp_block_input(spec.blocks[4], 4, true), (Shape{3, 24}));
  EXPECT_EQ(tp_block_output(spec.blocks[4], 4, true), (Shape{12, 10}));  // every token's local logits
  EXPECT_EQ(tp_block_input(spec.blocks[5], 4, true), (Shape{12, 10}));
  EXPECT_EQ(tp_block_output(spec.blocks[1], 1, true), (Shape{12, 24}));  // tp 1: nothing to split
  EXPECT_NO_THROW(partition::check_sequence_parallel(spec, 4, true));
  EXPECT_NO_THROW(partition::check_sequence_parallel(spec, 1, false));
  auto key_of = [&](int tp) {
    try {
      partition::check_sequence_parallel(spec, tp, true);
    } catch (const ConfigKeyError& e) {
      return e.key();
    }
    return std::string();
  };
  EXPECT_EQ(key_of(1), "parallel.sequence_parallel");
  EXPECT_EQ(key_of(8), "model.seq_len");  // 12 tokens over 8 ranks
}

// Sequence parallelism on a llama: the residual stream (embedding output, every llama block's and the final
// RmsNorm's input and output, the head's input) is tp rank r's [T / tp, D]; the logits stay vocab-parallel.
TEST(TpLayout, LlamaSequenceShards) {
  partition::LlamaConfig config;
  config.vocab_size = 37;
  config.d_model = 24;
  config.n_layers = 2;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.seq_len = 10;
  config.ffn_hidden_size = 20;
  const auto spec = partition::make_llama_spec(config);
  ASSERT_EQ(spec.blocks.size(), 6u);  // embed, 2 blocks, final_norm, head, loss
  const Shape shard{5, 24};
  EXPECT_EQ(tp_block_output(spec.blocks[0], 2, true), shard);
  for (std::size_t i = 1; i <= 3; ++i) {
    EXPECT_EQ(tp_block_input(spec.blocks[i], 2, true), shard) << spec.blocks[i].name;
    EXPECT_EQ(tp_block_output(spec.blocks[i], 2, true), shard) << spec.blocks[i].name;
    EXPECT_EQ(tp_block_output(spec.blocks[i], 2, false), (Shape{10, 24})) << spec.blocks[i].name;
  }
  EXPECT_EQ(tp_block_input(spec.blocks[4], 2, true), shard);
  EXPECT_EQ(tp_block_output(spec.blocks[4], 2, true), (Shape{10, 19}));  // ceil(37 / 2) local logits
  EXPECT_EQ(tp_block_input(spec.blocks[5], 2, true), (Shape{10, 19}));
  // seq_len 10 over tp 4 does not split (and llama is accepted, not refused as a non-gpt model).
  EXPECT_NO_THROW(partition::check_sequence_parallel(spec, 2, true));
  try {
    partition::check_sequence_parallel(spec, 4, true);
    ADD_FAILURE() << "seq_len 10 accepted at tp 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("10 is not divisible by parallel.tensor_model_parallel_size 4"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::layers::shard_test
