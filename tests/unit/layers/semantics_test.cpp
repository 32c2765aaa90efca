// The Layer contract beyond gradients: backward == backward_input + backward_weight, weight gradients
// accumulate, several micro-batches may be in flight, stashes hold exactly what the cost model says, and
// every intermediate tensor comes from (and returns to) ctx.allocator.
#include <gtest/gtest.h>

#include <cstdlib>

#include "layers/conv2d.hpp"
#include "layers/embedding.hpp"
#include "layers/linear.hpp"
#include "layers/models/builder.hpp"
#include "layers/recomputed.hpp"
#include "layers/transformer_block.hpp"
#include "layer_test_util.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/moe.hpp"

namespace cleave::layers::semantics_test {
namespace {

using testing::grad_copy;
using testing::random_ids;
using testing::random_tensor;
using testing::run_zero_bubble_order;
using testing::zero_grads;

ParamInit gpt_init() {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 5;
  return init;
}

void expect_near_vectors(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - b[i]) > tol * (1.0f + std::abs(b[i]))) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << a.size() << " elements differ";
}

TEST(LayerContract, BackwardEqualsInputThenWeight) {
  Context ctx;
  TransformerBlock block("blocks.0", 8, 2, 16, 2, gpt_init());
  Tensor x = random_tensor({2, 5, 8}, 1);
  Tensor dy = random_tensor({2, 5, 8}, 2);

  Stash s1;
  block.forward(x, s1, ctx);
  Tensor dx_fused = block.backward(dy, s1, ctx);
  const auto fused = grad_copy(block);

  zero_grads(block);
  Stash s2;
  block.forward(x, s2, ctx);
  Tensor dx_split = block.backward_input(dy, s2, ctx);
  EXPECT_FALSE(s2.empty()) << "backward_input must keep what backward_weight needs";
  for (float g : grad_copy(block)) ASSERT_EQ(g, 0.0f) << "backward_input touched a weight gradient";
  block.backward_weight(s2, ctx);
  EXPECT_TRUE(s2.empty());
  expect_near_vectors(dx_split.to_floats(), dx_fused.to_floats(), 0.0f, "dx");
  expect_near_vectors(grad_copy(block), fused, 0.0f, "weight grads");
}

TEST(LayerContract, TwoBackwardsAccumulateTwice) {
  Context ctx;
  TransformerBlock block("blocks.0", 8, 2, 16, 2, gpt_init());
  Conv2d conv("conv", 2, 3, 3, ParamInit{cpu_allocator()});
  struct Case {
    Layer* layer;
    Shape in, out;
  } cases[] = {{&block, {2, 5, 8}, {2, 5, 8}}, {&conv, {2, 2, 4, 5}, {2, 3, 4, 5}}};
  for (auto& c : cases) {
    Tensor x = random_tensor(c.in, 3);
    Tensor dy = random_tensor(c.out, 4);
    Stash stash;
    c.layer->forward(x, stash, ctx);
    c.layer->backward(dy, stash, ctx);
    const auto once = grad_copy(*c.layer);
    c.layer->forward(x, stash, ctx);
    c.layer->backward(dy, stash, ctx);
    auto twice = grad_copy(*c.layer);
    for (float& g : twice) g *= 0.5f;
    expect_near_vectors(twice, once, 1e-5f, "accumulated grads");
  }
}

TEST(LayerContract, MicroBatchesInFlightMatchSequential) {
  Context ctx;
  TransformerBlock block("blocks.0", 8, 2, 16, 2, gpt_init());
  Tensor xa = random_tensor({2, 5, 8}, 5), xb = random_tensor({3, 5, 8}, 6);
  Tensor dya = random_tensor({2, 5, 8}, 7), dyb = random_tensor({3, 5, 8}, 8);

  Stash sa, sb;
  block.forward(xa, sa, ctx);
  Tensor dxa_seq = block.backward(dya, sa, ctx);
  block.forward(xb, sb, ctx);
  Tensor dxb_seq = block.backward(dyb, sb, ctx);
  const auto seq = grad_copy(block);

  // F(A) F(B) I(A) I(B) W(B) W(A): the zero-bubble order, two stashes alive at once.
  zero_grads(block);
  block.forward(xa, sa, ctx);
  block.forward(xb, sb, ctx);
  Tensor dxa = block.backward_input(dya, sa, ctx);
  Tensor dxb = block.backward_input(dyb, sb, ctx);
  block.backward_weight(sb, ctx);
  block.backward_weight(sa, ctx);
  expect_near_vectors(dxa.to_floats(), dxa_seq.to_floats(), 0.0f, "dx of A");
  expect_near_vectors(dxb.to_floats(), dxb_seq.to_floats(), 0.0f, "dx of B");
  expect_near_vectors(grad_copy(block), seq, 1e-5f, "weight grads");
}

// Stash bytes after forward == cost model activation_bytes × batch, for every block of each model type.
void expect_stash_matches_cost_model(const partition::ModelSpec& spec, const Tensor& input, const Tensor& targets,
                                     partition::Recompute recompute = partition::Recompute::kNone) {
  BuildOptions options{cpu_allocator()};
  options.recompute = recompute;
  auto layers = build_blocks(spec, 0, spec.blocks.size(), options);
  Context ctx;
  const std::int64_t batch = input.dim(0);
  Tensor x = input;
  std::vector<Stash> stashes(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    x = forward_block(*layers[i], x, targets, stashes[i], ctx);
    const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, recompute);
    EXPECT_EQ(testing::stash_bytes(stashes[i]), cost.activation_bytes * batch)
        << enum_name(spec.type) << " block " << spec.blocks[i].name << " (" << layers[i]->kind() << "), recompute "
        << enum_name(recompute);
    if (spec.blocks[i].kind != partition::BlockKind::kSoftmaxCrossEntropy) {
      EXPECT_EQ(static_cast<std::int64_t>(x.nbytes()), cost.output_bytes * batch) << spec.blocks[i].name;
    }
  }
  // Split backward: what each block holds from its input gradient until its weight gradient.
  Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{1});
  for (std::size_t i = layers.size(); i-- > 0;) {
    dy = layers[i]->backward_input(dy, stashes[i], ctx);
    const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, recompute);
    EXPECT_EQ(testing::stash_bytes(stashes[i]), cost.weight_stash_bytes * batch)
        << enum_name(spec.type) << " block " << spec.blocks[i].name << " after backward_input, recompute "
        << enum_name(recompute);
  }
}

// The moe block's stash against its cost (partition/families/moe_block.cpp), with and without (gated) shared
// experts, tp 1: after
// forward exactly activation_bytes per sample; after backward_input weight_stash_bytes per sample plus the E
// f32 expert counts the micro-batch keeps for its weight gradient.
TEST(LayerContract, MoeStashBytesMatchCostModel) {
  partition::MoeConfig m;
  m.vocab_size = 17;
  m.d_model = 12;
  m.n_layers = 2;
  m.n_heads = 6;
  m.n_kv_heads = 2;
  m.seq_len = 5;
  m.ffn_hidden_size = 8;
  m.n_experts = 4;
  m.top_k = 2;
  for (const int variant : {0, 1, 2, 3}) {  // plain, Qwen3-MoE's q/k norms, a shared expert, Qwen2-MoE's gated one
  const bool qk_norm = variant == 1;
  const char* const names[] = {"plain", "qk_norm", "shared", "gated shared"};
  SCOPED_TRACE(names[variant]);
  m.qk_norm = qk_norm;
  m.n_shared_experts = variant >= 2 ? 2 : 0;
  m.shared_expert_gate = variant == 3;
  m.qkv_bias = variant == 3;
  const auto spec = partition::make_moe_spec(m);
  for (auto recompute : {partition::Recompute::kNone, partition::Recompute::kFull}) {
    BuildOptions options{cpu_allocator()};
    options.recompute = recompute;
    auto layers = build_blocks(spec, 0, spec.blocks.size(), options);
    Context ctx;
    const Tensor targets = random_ids({3, 5}, 17, 2);
    const std::int64_t batch = 3;
    Tensor x = random_ids({3, 5}, 17, 1);
    std::vector<Stash> stashes(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      x = forward_block(*layers[i], x, targets, stashes[i], ctx);
      const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, recompute);
      EXPECT_EQ(testing::stash_bytes(stashes[i]), cost.activation_bytes * batch)
          << spec.blocks[i].name << " after forward, recompute " << enum_name(recompute);
    }
    Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{1});
    for (std::size_t i = layers.size(); i-- > 0;) {
      dy = layers[i]->backward_input(dy, stashes[i], ctx);
      const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, recompute);
      const std::int64_t counts = spec.blocks[i].kind == partition::BlockKind::kMoeBlock ? m.n_experts * 4 : 0;
      EXPECT_EQ(testing::stash_bytes(stashes[i]), cost.weight_stash_bytes * batch + counts)
          << spec.blocks[i].name << " after backward_input, recompute " << enum_name(recompute);
    }
  }
  }
}

// Recomputation (selective, full) gives the plain block's outputs, input gradients and weight gradients bit
// for bit, also in the zero-bubble order F(A) F(B) I(A) I(B) W(B) W(A) with two micro-batches in flight.
TEST(LayerContract, RecomputedBlocksAreBitIdentical) {
  Context ctx;
  Tensor xa = random_tensor({2, 5, 8}, 15), xb = random_tensor({3, 5, 8}, 16);
  Tensor dya = random_tensor({2, 5, 8}, 17), dyb = random_tensor({3, 5, 8}, 18);
  auto run = [&](Layer& layer) { return run_zero_bubble_order(layer, ctx, xa, xb, dya, dyb); };
  TransformerBlock plain("blocks.0", 8, 2, 16, 2, gpt_init());
  const auto expected = run(plain);
  auto selective = std::make_unique<TransformerBlock>("blocks.0", 8, 2, 16, 2, gpt_init());
  selective->set_selective_recompute(true);
  EXPECT_EQ(run(*selective), expected) << "selective";
  RecomputedLayer full(std::make_unique<TransformerBlock>("blocks.0", 8, 2, 16, 2, gpt_init()));
  EXPECT_EQ(full.kind(), "transformer_block");
  EXPECT_EQ(run(full), expected) << "full";
}

TEST(LayerContract, StashBytesMatchCostModelAfterForwardAndAfterInputGrad) {
  partition::GptConfig g;
  g.vocab_size = 17;
  g.d_model = 12;
  g.n_layers = 2;
  g.n_heads = 3;
  g.seq_len = 5;
  g.d_ff = 20;
  const auto gpt = partition::make_gpt_spec(g);
  expect_stash_matches_cost_model(gpt, random_ids({3, 5}, 17, 1), random_ids({3, 5}, 17, 2));
  expect_stash_matches_cost_model(gpt, random_ids({3, 5}, 17, 1), random_ids({3, 5}, 17, 2),
                                  partition::Recompute::kSelective);
  expect_stash_matches_cost_model(gpt, random_ids({3, 5}, 17, 1), random_ids({3, 5}, 17, 2),
                                  partition::Recompute::kFull);

  partition::LlamaConfig l;  // grouped-query (6 heads over 2), tied, no position table
  l.vocab_size = 17;
  l.d_model = 12;
  l.n_layers = 2;
  l.n_heads = 6;
  l.n_kv_heads = 2;
  l.seq_len = 5;
  l.ffn_hidden_size = 20;
  l.tie_embeddings = true;
  for (const bool qk_norm : {false, true}) {  // Qwen3's per-head q/k norms stash q, k and their rstd
    l.qk_norm = qk_norm;
    for (auto recompute : {partition::Recompute::kNone, partition::Recompute::kSelective, partition::Recompute::kFull}) {
      SCOPED_TRACE(qk_norm ? "qk_norm" : "plain");
      expect_stash_matches_cost_model(partition::make_llama_spec(l), random_ids({3, 5}, 17, 1),
                                      random_ids({3, 5}, 17, 2), recompute);
    }
  }

  partition::MlpConfig m;
  m.in_features = 9;
  m.hidden = {7, 5};
  m.num_classes = 4;
  m.activation = partition::Activation::kGelu;
  expect_stash_matches_cost_model(partition::make_mlp_spec(m), random_tensor({3, 9}, 3), random_ids({3}, 4, 4));

  partition::CnnConfig c;
  c.in_channels = 2;
  c.height = 7;
  c.width = 6;
  c.channels = {3, 4};
  c.num_classes = 5;
  expect_stash_matches_cost_model(partition::make_cnn_spec(c), random_tensor({2, 2, 7, 6}, 5),
                                  random_ids({2}, 5, 6));
}

class CountingAllocator final : public Allocator {
 public:
  CountingAllocator() : Allocator(Device::cpu()) {}
  ~CountingAllocator() override { release_cache(); }

 protected:
  void* system_allocate(std::size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void system_free(void* ptr, std::size_t) override { std::free(ptr); }
};

TEST(LayerContract, IntermediatesComeFromTheContextAllocatorAndAreReleased) {
  CountingAllocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  TransformerBlock block("blocks.0", 8, 2, 16, 2, gpt_init());
  Conv2d conv("conv", 2, 3, 3, ParamInit{cpu_allocator()});
  {
    Tensor x = random_tensor({2, 5, 8}, 1);
    Stash stash;
    Tensor y = block.forward(x, stash, ctx);
    const auto after_forward = alloc.stats();
    // Everything the stash holds except the caller's input lives in `alloc`.
    EXPECT_EQ(after_forward.current_of(MemoryCategory::kActivations),
              testing::stash_bytes(stash) - static_cast<std::int64_t>(x.nbytes()) + static_cast<std::int64_t>(y.nbytes()));
    Tensor dx = block.backward(random_tensor({2, 5, 8}, 2), stash, ctx);
    EXPECT_GT(alloc.stats().peak_of(MemoryCategory::kWorkspace), 0);  // the attention kernel's block scratch
    EXPECT_EQ(alloc.stats().current_of(MemoryCategory::kWorkspace), 0);
  }
  {
    Stash stash;
    conv.forward(random_tensor({1, 2, 4, 4}, 3), stash, ctx);
    conv.backward(random_tensor({1, 3, 4, 4}, 4), stash, ctx);
  }
  EXPECT_EQ(alloc.stats().current_of(MemoryCategory::kActivations), 0);
  EXPECT_EQ(alloc.stats().current_of(MemoryCategory::kWorkspace), 0);
  EXPECT_EQ(alloc.stats().current_of(MemoryCategory::kParameters), 0);  // params use BuildOptions / ParamInit
}

}  // namespace
}  // namespace cleave::layers::semantics_test
