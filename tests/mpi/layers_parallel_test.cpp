// Tensor-parallel layers under mpiexec (the tp group is the whole world, tp = 2 or 4): every parallel layer
// against its single-rank counterpart built on every rank from the same seed and names.
//
// For each layer: the initial shards equal the slice of the single-rank parameters bit for bit; then both
// get the same random weights (the reference's, sliced) and the same random inputs (batch 3, sequence 7,
// vocabulary 37, not divisible by tp), and run two micro-batches in a zero-bubble order
// F0 F1 I1 I0 W0 W1 (separate stashes, weight gradients accumulated). Compared: forward outputs, input
// gradients and weight gradients gathered from all tp ranks into logical tensors (all_gather +
// place_shard). Bound: max |got − want| <= 1e-5 · max |want| per tensor (fp32; the tp all-reduces and
// split GEMMs change only the summation order, so the observed error is a few ulps of the largest
// element), and every reference tensor is checked to be non-zero so an all-zero result cannot pass.
// Replicated parameters' gradients must be bit-identical on every tp rank, and padding rows' gradients
// exactly 0. A whole tiny gpt (build_blocks, tied and untied) at tp = world size against tp = 1 gives the
// same per-micro-batch losses and gathered gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"
#include "layers/attention.hpp"
#include "layers/embedding.hpp"
#include "layers/linear.hpp"
#include "layers/lm_head.hpp"
#include "layers/mlp.hpp"
#include "layers/models/builder.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/parallel_transformer_block.hpp"
#include "layers/parallel/row_parallel_linear.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/tp_util.hpp"
#include "layers/parallel/vocab_parallel_cross_entropy.hpp"
#include "layers/parallel/vocab_parallel_embedding.hpp"
#include "layers/parallel/vocab_parallel_lm_head.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "layers/transformer_block.hpp"
#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"

namespace cleave::layers::layers_parallel_test {
namespace {

constexpr std::int64_t kBatch = 3;
constexpr std::int64_t kSeq = 7;
constexpr std::int64_t kVocab = 37;
constexpr double kTol = 1e-5;

// ---- values -------------------------------------------------------------------------------------------

Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(t.data<float>(), t.numel(), seed, rng::hash_key("tp-test-input"), 0.0f, scale);
  return t;
}

Tensor random_ids(const Shape& shape, std::int64_t vocab, std::uint64_t seed, bool with_ignored = false) {
  Tensor t = Tensor::empty(shape, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const auto draw = rng::bits64(seed, rng::hash_key("tp-test-ids"), static_cast<std::uint64_t>(i));
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>(draw % static_cast<std::uint64_t>(vocab));
    if (with_ignored && draw % 5 == 0) t.data<std::int32_t>()[i] = -1;
  }
  // Both ends of the vocabulary, so the first and the last (padded) shard see their ids.
  t.data<std::int32_t>()[0] = static_cast<std::int32_t>(vocab - 1);
  t.data<std::int32_t>()[1] = 0;
  return t;
}

Tensor from(const std::vector<float>& values, const Shape& shape) { return Tensor::from_floats(values, shape); }

// The split of a tensor's last dimension held by tp rank `index` (padded like a vocabulary shard).
ShardSpec last_dim_split(const Shape& shape, int parts, int index, int groups = 1) {
  return make_shard_spec(shape, shape.rank() - 1, parts, index, groups);
}

Tensor slice_of(const Tensor& logical, const ShardSpec& spec) {
  return from(shard_of(logical.to_floats(), spec), shard_shape(spec));
}

// max |got - want| / max |want| (want must not be all zeros).
double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale > 0 ? err / scale : (err > 0 ? INFINITY : 0.0);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                  double tol = kTol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const bool nonzero = std::any_of(want.begin(), want.end(), [](float v) { return v != 0.0f; });
  EXPECT_TRUE(nonzero) << what << ": the reference is all zeros, the comparison would prove nothing";
  EXPECT_LE(max_rel_error(got, want), tol) << what;
}

// ---- parameters ---------------------------------------------------------------------------------------

std::map<std::string, std::shared_ptr<Param>> by_name(const std::vector<std::shared_ptr<Param>>& params) {
  std::map<std::string, std::shared_ptr<Param>> out;
  for (const auto& p : params) out.emplace(p->name, p);
  return out;
}

// Every parallel Param's value equals the slice of the same-named reference Param, exactly.
void expect_initial_slices(const std::vector<std::shared_ptr<Param>>& parallel,
                           const std::vector<std::shared_ptr<Param>>& reference) {
  auto ref = by_name(reference);
  ASSERT_EQ(by_name(parallel).size(), ref.size()) << "the parallel layer must have the same parameter names";
  for (const auto& p : parallel) {
    ASSERT_TRUE(ref.count(p->name)) << p->name;
    EXPECT_EQ(p->shard.logical, ref[p->name]->value.shape()) << p->name;
    EXPECT_EQ(p->value.to_floats(), shard_of(ref[p->name]->value.to_floats(), p->shard)) << p->name;
  }
}

// Gives the reference random weights (norm scales around 1) and the parallel layer their slices.
void randomize_both(const std::vector<std::shared_ptr<Param>>& parallel,
                    const std::vector<std::shared_ptr<Param>>& reference, std::uint64_t seed) {
  for (const auto& p : by_name(reference)) {
    const bool norm_scale = p.first.find("ln") != std::string::npos && p.first.ends_with(".weight");
    rng::fill_normal(p.second->value.data<float>(), p.second->value.numel(), seed, rng::hash_key(p.first),
                     norm_scale ? 1.0f : 0.0f, 0.3f);
  }
  auto ref = by_name(reference);
  for (const auto& p : parallel) {
    const auto values = shard_of(ref[p->name]->value.to_floats(), p->shard);
    std::copy(values.begin(), values.end(), p->value.data<float>());
  }
}

// The logical gradient of a parallel Param, gathered from every tp rank. Replicated gradients must be
// bit-identical on every rank; padding rows must hold exactly 0.
std::vector<float> gather_grad(const Param& p, comm::Communicator& tp) {
  const std::int64_t n = p.grad.numel();
  Tensor all = Tensor::empty(Shape{n * tp.size()}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
  tp.all_gather(p.grad, all)->wait();
  const auto gathered = all.to_floats();
  std::vector<float> logical;
  for (int q = 0; q < tp.size(); ++q) {
    std::vector<float> block(gathered.begin() + q * n, gathered.begin() + (q + 1) * n);
    if (p.shard.dim < 0) {
      EXPECT_EQ(block, p.grad.to_floats()) << p.name << ": replicated gradient differs on tp rank " << q;
      continue;
    }
    ShardSpec spec = p.shard;
    spec.index = q;
    // Padding rows are exactly the shard elements for_each_shard_run does not visit.
    std::vector<char> real(block.size(), 0);
    for_each_shard_run(spec, [&](std::int64_t, std::int64_t to, std::int64_t len) {
      std::fill_n(real.begin() + to, len, 1);
    });
    for (std::size_t i = 0; i < block.size(); ++i) {
      if (!real[i]) {
        EXPECT_EQ(block[i], 0.0f) << p.name << ": padding gradient on tp rank " << q;
      }
    }
    place_shard(logical, block, spec);
  }
  return p.shard.dim < 0 ? p.grad.to_floats() : logical;
}

void expect_same_gradients(const std::vector<std::shared_ptr<Param>>& parallel,
                           const std::vector<std::shared_ptr<Param>>& reference, comm::Communicator& tp,
                           const std::string& what) {
  auto ref = by_name(reference);
  for (const auto& p : by_name(parallel)) {
    expect_close(gather_grad(*p.second, tp), ref[p.first]->grad.to_floats(), what + " grad " + p.first);
  }
}

// ---- the two-micro-batch comparison --------------------------------------------------------------------

// How the parallel layer's input and output relate to the reference's: replicated, or a shard given by
// the function (logical shape -> spec).
using SplitFn = std::function<ShardSpec(const Shape&)>;

struct LayerPair {
  Layer& reference;
  Layer& parallel;
  SplitFn input_split;   // null: the parallel input is the reference input
  SplitFn output_split;  // null: the parallel output should equal the reference output
};

// Runs F0 F1 I1 I0 W0 W1 on both layers with inputs xs[mb], output gradients from `make_dy` and targets
// (loss layers), then compares outputs, input gradients and gathered weight gradients.
void compare_two_microbatches(LayerPair pair, const std::vector<Tensor>& xs, const std::vector<Tensor>& targets,
                              comm::Communicator& tp, const std::string& what,
                              const std::function<Tensor(const Shape&, int)>& make_dy) {
  Context ref_ctx, par_ctx;
  par_ctx.tp_comm = &tp;
  const int mbs = static_cast<int>(xs.size());
  std::vector<Stash> ref_stash(static_cast<std::size_t>(mbs)), par_stash(static_cast<std::size_t>(mbs));
  std::vector<Tensor> ys(static_cast<std::size_t>(mbs)), par_ys(static_cast<std::size_t>(mbs));
  for (int mb = 0; mb < mbs; ++mb) {
    const auto i = static_cast<std::size_t>(mb);
    const Tensor tg = targets.empty() ? Tensor() : targets[i];
    ys[i] = forward_block(pair.reference, xs[i], tg, ref_stash[i], ref_ctx);
    const Tensor px = pair.input_split ? slice_of(xs[i], pair.input_split(xs[i].shape())) : xs[i];
    par_ys[i] = forward_block(pair.parallel, px, tg, par_stash[i], par_ctx);
    const Tensor want = pair.output_split ? slice_of(ys[i], pair.output_split(ys[i].shape())) : ys[i];
    ASSERT_EQ(par_ys[i].shape(), want.shape()) << what;
    expect_close(par_ys[i].to_floats(), want.to_floats(), what + " forward, micro-batch " + std::to_string(mb));
  }
  for (int mb = mbs - 1; mb >= 0; --mb) {
    const auto i = static_cast<std::size_t>(mb);
    const Tensor dy = make_dy(ys[i].shape(), mb);
    const Tensor par_dy = pair.output_split ? slice_of(dy, pair.output_split(dy.shape())) : dy;
    const Tensor dx = pair.reference.backward_input(dy, ref_stash[i], ref_ctx);
    const Tensor par_dx = pair.parallel.backward_input(par_dy, par_stash[i], par_ctx);
    ASSERT_EQ(dx.defined(), par_dx.defined()) << what;
    if (!dx.defined()) continue;
    const Tensor want = pair.input_split ? slice_of(dx, pair.input_split(dx.shape())) : dx;
    ASSERT_EQ(par_dx.shape(), want.shape()) << what;
    expect_close(par_dx.to_floats(), want.to_floats(), what + " input gradient, micro-batch " + std::to_string(mb));
  }
  for (int mb = 0; mb < mbs; ++mb) {
    const auto i = static_cast<std::size_t>(mb);
    pair.reference.backward_weight(ref_stash[i], ref_ctx);
    pair.parallel.backward_weight(par_stash[i], par_ctx);
    EXPECT_TRUE(par_stash[i].empty()) << what << ": backward_weight must release the stash";
  }
  expect_same_gradients(pair.parallel.params(), pair.reference.params(), tp, what);
}

Tensor random_dy(const Shape& shape, int mb) { return random_tensor(shape, 500 + static_cast<std::uint64_t>(mb)); }

std::vector<Tensor> two_inputs(const Shape& shape, std::uint64_t seed) {
  return {random_tensor(shape, seed), random_tensor(shape, seed + 1)};
}

ParamInit torch_init(std::uint64_t seed) {
  ParamInit init{cpu_allocator()};
  init.seed = seed;
  init.scheme = InitScheme::kTorchDefault;
  return init;
}

ParamInit gpt_init(std::uint64_t seed) {
  ParamInit init{cpu_allocator()};
  init.seed = seed;
  init.scheme = InitScheme::kGpt2;
  return init;
}

// ---- layers -------------------------------------------------------------------------------------------

TEST(TensorParallel, ColumnParallelLinear) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  for (int groups : {1, 3}) {
    const std::string what = "column_parallel_linear groups " + std::to_string(groups);
    Linear reference("fc", 5, 12, true, torch_init(11));
    ColumnParallelLinear parallel("fc", 5, 12, true, torch_init(11), tp, r, groups);
    expect_initial_slices(parallel.params(), reference.params());
    compare_two_microbatches({reference, parallel, nullptr,
                              [&](const Shape& s) { return last_dim_split(s, tp, r, groups); }},
                             two_inputs(Shape{kBatch, kSeq, 5}, 1), {}, *world, what, random_dy);
  }
}

TEST(TensorParallel, RowParallelLinear) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  Linear reference("proj", 8, 7, true, torch_init(12));
  RowParallelLinear parallel("proj", 8, 7, true, torch_init(12), tp, r);
  expect_initial_slices(parallel.params(), reference.params());
  compare_two_microbatches({reference, parallel, [&](const Shape& s) { return last_dim_split(s, tp, r); }, nullptr},
                           two_inputs(Shape{kBatch, kSeq, 8}, 3), {}, *world, "row_parallel_linear", random_dy);
}

// A composite (attention, mlp, block: [B, T, D] in and out, replicated) against its one-rank reference:
// the initial slices, then the same random weights and inputs.
void compare_composite(Layer& reference, Layer& parallel, std::int64_t d_model, std::uint64_t weight_seed,
                       std::uint64_t input_seed, comm::Communicator& tp, const std::string& what) {
  expect_initial_slices(parallel.params(), reference.params());
  randomize_both(parallel.params(), reference.params(), weight_seed);
  compare_two_microbatches({reference, parallel, nullptr, nullptr},
                           two_inputs(Shape{kBatch, kSeq, d_model}, input_seed), {}, tp, what, random_dy);
}

TEST(TensorParallel, AttentionWithHeadsSplit) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  const ParamInit init = gpt_init(13), proj_init = gpt_init(13).with_std(0.01f);
  CausalSelfAttention reference("blocks.0.attn", 16, 4, init, proj_init);
  auto parallel = make_parallel_attention("blocks.0.attn", 16, 4, init, proj_init, tp, r);
  EXPECT_EQ(parallel->kind(), "parallel_causal_self_attention");
  compare_composite(reference, *parallel, 16, 21, 5, *world, "parallel attention");
}

TEST(TensorParallel, Mlp) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  const ParamInit init = gpt_init(14), proj_init = gpt_init(14).with_std(0.01f);
  Mlp reference("blocks.0.mlp", 12, 20, init, proj_init);
  auto parallel = make_parallel_mlp("blocks.0.mlp", 12, 20, init, proj_init, tp, r);
  EXPECT_EQ(parallel->kind(), "parallel_mlp");
  compare_composite(reference, *parallel, 12, 22, 7, *world, "parallel mlp");
}

TEST(TensorParallel, TransformerBlock) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  TransformerBlock reference("blocks.1", 16, 4, 24, 2, gpt_init(15));
  auto parallel = make_parallel_transformer_block("blocks.1", 16, 4, 24, 2, gpt_init(15), tp, r);
  EXPECT_EQ(parallel->kind(), "parallel_transformer_block");
  compare_composite(reference, *parallel, 16, 23, 9, *world, "parallel transformer block");
}

TEST(TensorParallel, VocabParallelEmbedding) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  Embedding reference("embed", kVocab, 9, 6, gpt_init(16));
  VocabParallelEmbedding parallel("embed", kVocab, 9, 6, gpt_init(16), tp, r);
  expect_initial_slices(parallel.params(), reference.params());
  randomize_both(parallel.params(), reference.params(), 24);
  const std::vector<Tensor> ids = {random_ids(Shape{kBatch, kSeq}, kVocab, 31),
                                   random_ids(Shape{kBatch, kSeq}, kVocab, 32)};
  compare_two_microbatches({reference, parallel, nullptr, nullptr}, ids, {}, *world, "vocab_parallel_embedding",
                           random_dy);
  // The forward is exact: each element has one non-zero contribution to the all-reduce.
  Context ctx;
  ctx.tp_comm = world.get();
  Stash a, b;
  EXPECT_EQ(parallel.forward(ids[0], a, ctx).to_floats(), reference.forward(ids[0], b, ctx).to_floats());
}

TEST(TensorParallel, VocabParallelLmHead) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  const ParamInit init = gpt_init(17);
  auto weight = make_param("head.weight", Shape{kVocab, 10}, true, init.allocator);
  init_normal(*weight, init.seed, init.std);
  LmHead reference("head", weight, false);
  VocabParallelLmHead parallel("head", make_vocab_parallel_table("head.weight", kVocab, 10, init.std, init, tp, r),
                               false, tp, r);
  EXPECT_EQ(parallel.vocab_size(), kVocab);
  EXPECT_EQ(parallel.local_vocab(), (kVocab + tp - 1) / tp);
  expect_initial_slices(parallel.params(), reference.params());
  randomize_both(parallel.params(), reference.params(), 25);
  compare_two_microbatches(
      {reference, parallel, nullptr, [&](const Shape& s) { return last_dim_split(s, tp, r); }},
      two_inputs(Shape{kBatch, kSeq, 10}, 11), {}, *world, "vocab_parallel_lm_head", [&](const Shape& s, int mb) {
        return random_dy(s, mb);  // the padding columns of the sliced dy are 0, as the loss makes them
      });
}

TEST(TensorParallel, VocabParallelCrossEntropy) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  SoftmaxCrossEntropy reference;
  VocabParallelCrossEntropy parallel(kVocab, tp, r);
  const Shape logits_shape{kBatch, kSeq, kVocab};
  const std::vector<Tensor> logits = {random_tensor(logits_shape, 41, 3.0f), random_tensor(logits_shape, 42, 3.0f)};
  const std::vector<Tensor> targets = {random_ids(Shape{kBatch, kSeq}, kVocab, 43, true),
                                       random_ids(Shape{kBatch, kSeq}, kVocab, 44, true)};
  const auto loss_scale = [](const Shape&, int mb) {
    return Tensor::from_floats(std::vector<float>{mb == 0 ? 0.75f : 1.5f}, Shape{});
  };
  compare_two_microbatches({reference, parallel, [&](const Shape& s) { return last_dim_split(s, tp, r); }, nullptr},
                           logits, targets, *world, "vocab_parallel_cross_entropy", loss_scale);

  // Padding columns are excluded: large values there change nothing, and their gradient is 0.
  const ShardSpec split = last_dim_split(logits_shape, tp, r);
  Tensor local = slice_of(logits[0], split);
  std::vector<char> real(static_cast<std::size_t>(local.numel()), 0);
  for_each_shard_run(split, [&](std::int64_t, std::int64_t to, std::int64_t n) {
    std::fill_n(real.begin() + to, n, 1);
  });
  for (std::int64_t i = 0; i < local.numel(); ++i) {
    if (!real[static_cast<std::size_t>(i)]) local.data<float>()[i] = 50.0f;
  }
  Context ctx, par_ctx;
  par_ctx.tp_comm = world.get();
  Stash s, ps;
  const float want = reference.forward(logits[0], targets[0], s, ctx).data<float>()[0];
  const float got = parallel.forward(local, targets[0], ps, par_ctx).data<float>()[0];
  EXPECT_LE(std::abs(got - want), kTol * std::abs(want)) << "padding logits must not enter the loss";
  const auto dlocal = parallel.backward_input(loss_scale(Shape{}, 0), ps, par_ctx).to_floats();
  for (std::size_t i = 0; i < dlocal.size(); ++i) {
    if (!real[i]) {
      EXPECT_EQ(dlocal[i], 0.0f) << "padding logit gradient";
    }
  }
}

// The sequence collectives against closed forms, B = 3 (the per-sample path), T = 2·tp, F = 5, in f32 and
// bf16 (small integers: exact in both): all-gather puts rank r's shard of sample b at tokens
// [r·T/tp, (r+1)·T/tp) of sample b; reduce-scatter gives each rank the sum over ranks of its own tokens.
TEST(SequenceParallel, GatherAndReduceScatterPerSample) {
  auto world = testing::make_world();
  const int tp = world->size(), rank = world->rank();
  const std::int64_t batch = 3, t = 2 * tp, ts = 2, f = 5;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Context ctx;
    ctx.tp_comm = world.get();
    ctx.sequence_parallel = true;
    const auto value = [](int r, std::int64_t b, std::int64_t tok, std::int64_t c) {
      return static_cast<double>(testing::small_value(r, (b * 31 + tok) * 7 + c));
    };
    Tensor local = Tensor::zeros(Shape{batch, ts, f}, dtype, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t k = 0; k < ts; ++k)
        for (std::int64_t c = 0; c < f; ++c) testing::set_value(local, (b * ts + k) * f + c, value(rank, b, k, c));
    const Tensor full = sequence_all_gather(local, ctx, tp, rank, "test");
    ASSERT_EQ(full.shape(), (Shape{batch, t, f}));
    std::int64_t wrong = 0;
    double norm = 0;
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t tok = 0; tok < t; ++tok)
        for (std::int64_t c = 0; c < f; ++c) {
          const double got = testing::get_value(full, (b * t + tok) * f + c);
          wrong += got != value(static_cast<int>(tok / ts), b, tok % ts, c);
          norm += got * got;
        }
    EXPECT_EQ(wrong, 0) << dtype_name(dtype);
    EXPECT_GT(norm, 0.0);
    Tensor partial = Tensor::zeros(Shape{batch, t, f}, dtype, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t tok = 0; tok < t; ++tok)
        for (std::int64_t c = 0; c < f; ++c) testing::set_value(partial, (b * t + tok) * f + c, value(rank, b, tok, c));
    const Tensor summed = sequence_reduce_scatter(partial, ctx, tp, rank, "test");
    ASSERT_EQ(summed.shape(), (Shape{batch, ts, f}));
    wrong = 0;
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t k = 0; k < ts; ++k)
        for (std::int64_t c = 0; c < f; ++c) {
          double expected = 0;
          for (int r = 0; r < tp; ++r) expected += value(r, b, rank * ts + k, c);
          wrong += testing::get_value(summed, (b * ts + k) * f + c) != expected;
        }
    EXPECT_EQ(wrong, 0) << dtype_name(dtype);
  }
  // T not divisible by tp: the error names model.seq_len.
  Context ctx;
  ctx.tp_comm = world.get();
  Tensor odd = Tensor::zeros(Shape{1, 2 * tp + 1, 3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  try {
    sequence_reduce_scatter(odd, ctx, tp, rank, "test");
    ADD_FAILURE() << "accepted a sequence of " << 2 * tp + 1 << " tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.seq_len"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, MissingOrWrongTpCommunicatorIsAnError) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  ColumnParallelLinear layer("fc", 4, 8, true, torch_init(1), tp, r);
  Context ctx;  // no tp_comm
  Stash stash;
  EXPECT_THROW(layer.forward(random_tensor(Shape{2, 4}, 1), stash, ctx), Error);
  ColumnParallelLinear other_rank("fc", 4, 8, true, torch_init(1), tp, (r + 1) % tp);
  ctx.tp_comm = world.get();
  EXPECT_THROW(other_rank.forward(random_tensor(Shape{2, 4}, 1), stash, ctx), Error);
}

// ---- a whole tiny gpt ---------------------------------------------------------------------------------

// Forward of every layer for each micro-batch, then backward_input of every layer in reverse (micro-batches
// in reverse), then every backward_weight: the order a zero-bubble schedule may use. Returns the losses.
std::vector<float> run_gpt(std::vector<LayerPtr>& layers, const std::vector<Tensor>& ids,
                           const std::vector<Tensor>& targets, Context& ctx) {
  const std::size_t mbs = ids.size(), n = layers.size();
  std::vector<std::vector<Stash>> stash(mbs, std::vector<Stash>(n));
  std::vector<float> losses;
  for (std::size_t mb = 0; mb < mbs; ++mb) {
    Tensor x = ids[mb];
    for (std::size_t l = 0; l < n; ++l) x = forward_block(*layers[l], x, targets[mb], stash[mb][l], ctx);
    losses.push_back(x.data<float>()[0]);
  }
  for (std::size_t m = mbs; m-- > 0;) {
    Tensor dy = Tensor::from_floats(std::vector<float>{0.5f}, Shape{});  // 1 / micro-batches
    for (std::size_t l = n; l-- > 0;) dy = layers[l]->backward_input(dy, stash[m][l], ctx);
  }
  for (std::size_t mb = 0; mb < mbs; ++mb) {
    for (std::size_t l = 0; l < n; ++l) layers[l]->backward_weight(stash[mb][l], ctx);
  }
  return losses;
}

TEST(TensorParallel, WholeTinyGptMatchesOneRank) {
  auto world = testing::make_world();
  const int tp = world->size(), r = world->rank();
  for (bool tied : {true, false}) {
    const std::string what = tied ? "tiny gpt (tied)" : "tiny gpt (untied)";
    partition::GptConfig config;
    config.vocab_size = kVocab;
    config.d_model = 16;
    config.n_layers = 2;
    config.n_heads = 4;
    config.seq_len = 9;
    config.tie_embeddings = tied;
    const auto spec = partition::make_gpt_spec(config);
    BuildOptions one{cpu_allocator()}, sharded{cpu_allocator()};
    one.seed = sharded.seed = 99;
    sharded.tp_size = tp;
    sharded.tp_rank = r;
    auto reference = build_blocks(spec, 0, spec.blocks.size(), one);
    auto parallel = build_blocks(spec, 0, spec.blocks.size(), sharded);
    const auto ref_params = collect_params(reference), par_params = collect_params(parallel);
    expect_initial_slices(par_params, ref_params);
    randomize_both(par_params, ref_params, 26);

    const std::vector<Tensor> ids = {random_ids(Shape{kBatch, kSeq}, kVocab, 51),
                                     random_ids(Shape{kBatch, kSeq}, kVocab, 52)};
    const std::vector<Tensor> targets = {random_ids(Shape{kBatch, kSeq}, kVocab, 53, true),
                                         random_ids(Shape{kBatch, kSeq}, kVocab, 54, true)};
    Context ref_ctx, par_ctx;
    par_ctx.tp_comm = world.get();
    const auto want = run_gpt(reference, ids, targets, ref_ctx);
    const auto got = run_gpt(parallel, ids, targets, par_ctx);
    for (std::size_t mb = 0; mb < want.size(); ++mb) {
      EXPECT_GT(want[mb], 0.0f);
      EXPECT_LE(std::abs(got[mb] - want[mb]), kTol * want[mb]) << what << " loss, micro-batch " << mb;
    }
    // The loss is the same scalar on every tp rank.
    Tensor mine = Tensor::from_floats(got, Shape{static_cast<std::int64_t>(got.size())});
    Tensor all = Tensor::empty(Shape{mine.numel() * tp}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
    world->all_gather(mine, all)->wait();
    const auto losses = all.to_floats();
    for (int q = 0; q < tp; ++q) {
      EXPECT_TRUE(std::equal(got.begin(), got.end(), losses.begin() + q * mine.numel())) << "loss on tp rank " << q;
    }
    expect_same_gradients(par_params, ref_params, *world, what);
  }
}

}  // namespace
}  // namespace cleave::layers::layers_parallel_test
