// Qwen2-MoE's sigmoid-gated shared expert (layers/moe/shared_expert_gate.hpp): the gate against a double reference
// (y = sigmoid(x · w) · SwiGLU(x)), every gradient (gate, shared SwiGLU, input) by central finite differences,
// the MoeMlp with a gated shared expert equal to the same MoeMlp without shared experts plus the gated
// reference, its gradients by finite differences through the whole mixture, and the moe block's parameter names
// and count against the cost model with model.shared_expert_gate; the host waits of an MoE layer per pass (with a
// softmax or sigmoid router, with the gated shared expert).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "layers/linear.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/moe/moe_block.hpp"
#include "layers/moe/moe_mlp.hpp"
#include "layers/moe/shared_expert_gate.hpp"
#include "partition/cost_model.hpp"
#include "layer_test_util.hpp"
#include "moe_test_util.hpp"

namespace cleave::layers::moe_shared_gate_test {
namespace {

using testing::random_tensor;
using testing::randomize;

ParamInit gate_init() {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 43;
  return init;
}

LayerPtr swiglu(const std::string& prefix, std::int64_t d, std::int64_t width) {
  const ParamInit init = gate_init();
  return std::make_unique<SwigluMlp>(prefix, std::make_unique<Linear>(prefix + ".gate", d, width, false, init),
                                     std::make_unique<Linear>(prefix + ".up", d, width, false, init),
                                     std::make_unique<Linear>(prefix + ".down", width, d, false, init), false);
}

std::unique_ptr<SharedExpertGate> make_gate(std::int64_t d, std::int64_t width) {
  auto gate = std::make_unique<SharedExpertGate>("m.shared_gate", d, swiglu("m.shared", d, width), gate_init());
  std::uint64_t seed = 500;
  for (auto& p : gate->params()) randomize(*p, ++seed, 0.0f, 0.5f);
  return gate;
}

std::map<std::string, std::vector<double>> values_of(const Layer& layer) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& p : layer.params()) {
    const auto f = p->value.to_floats();
    out[p->name] = {f.begin(), f.end()};
  }
  return out;
}

// sigmoid(x · w) · down(silu(gate x) ⊙ up x), in double, for every row of x [N, D].
std::vector<double> ref_gated(const std::map<std::string, std::vector<double>>& p, const Tensor& x, std::int64_t d,
                              std::int64_t width) {
  const auto xf = x.to_floats();
  const std::int64_t n = x.numel() / d;
  const auto& wg = p.at("m.shared.gate.weight");
  const auto& wu = p.at("m.shared.up.weight");
  const auto& wd = p.at("m.shared.down.weight");
  const auto& w = p.at("m.shared_gate.weight");
  std::vector<double> y(static_cast<std::size_t>(n * d), 0.0);
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xt = &xf[static_cast<std::size_t>(t * d)];
    double logit = 0;
    for (std::int64_t c = 0; c < d; ++c) logit += xt[c] * w[static_cast<std::size_t>(c)];
    const double sig = 1.0 / (1.0 + std::exp(-logit));
    std::vector<double> h(static_cast<std::size_t>(width));
    for (std::int64_t j = 0; j < width; ++j) {
      double a = 0, b = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        a += xt[c] * wg[static_cast<std::size_t>(j * d + c)];
        b += xt[c] * wu[static_cast<std::size_t>(j * d + c)];
      }
      h[static_cast<std::size_t>(j)] = a / (1.0 + std::exp(-a)) * b;
    }
    for (std::int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (std::int64_t j = 0; j < width; ++j) acc += wd[static_cast<std::size_t>(c * width + j)] * h[static_cast<std::size_t>(j)];
      y[static_cast<std::size_t>(t * d + c)] = sig * acc;
    }
  }
  return y;
}

TEST(SharedExpertGate, ForwardMatchesTheDoubleReference) {
  const std::int64_t d = 6, width = 10;
  auto gate = make_gate(d, width);
  const Tensor x = random_tensor({2, 7, d}, 11);
  Context ctx;
  Stash stash;
  const auto y = gate->forward(x, stash, ctx).to_floats();
  const auto ref = ref_gated(values_of(*gate), x, d, width);
  ASSERT_EQ(y.size(), ref.size());
  double worst = 0, norm = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, std::abs(y[i] - ref[i]));
    norm += ref[i] * ref[i];
  }
  EXPECT_GT(norm, 0.0);
  EXPECT_LT(worst, 1e-5);
  // The gate is neither 0 nor 1 everywhere: the rows are scaled, not passed or dropped.
  Stash plain_stash;
  auto plain = swiglu("m.shared", d, width);
  const auto p = values_of(*gate);
  for (auto& param : plain->params()) {
    const auto& v = p.at(param->name);
    for (std::size_t i = 0; i < v.size(); ++i) param->value.data<float>()[i] = static_cast<float>(v[i]);
  }
  const auto ungated = plain->forward(x, plain_stash, ctx).to_floats();
  double ratio_min = 1, ratio_max = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (std::abs(ungated[i]) < 1e-3) continue;
    ratio_min = std::min(ratio_min, static_cast<double>(y[i] / ungated[i]));
    ratio_max = std::max(ratio_max, static_cast<double>(y[i] / ungated[i]));
  }
  EXPECT_GT(ratio_min, 0.0);
  EXPECT_LT(ratio_max, 1.0);
  EXPECT_GT(ratio_max - ratio_min, 0.05) << "the gate should differ between tokens";
}

TEST(SharedExpertGate, GradientsMatchFiniteDifferences) {
  auto gate = make_gate(5, 8);
  Context ctx;
  testing::GradCheck opt;
  opt.eps = 2e-3f;
  opt.tol = 1e-2;
  testing::check_gradients(*gate, random_tensor({2, 4, 5}, 21), ctx, opt);
}

RouterOptions softmax_router(std::int64_t e, std::int64_t k) {
  RouterOptions o;
  o.kind = partition::RouterKind::kSoftmax;
  o.experts = e;
  o.top_k = k;
  o.normalize = false;  // Qwen2-MoE's norm_topk_prob default
  return o;
}

// The mixture with a gated shared expert is the mixture without one plus the gated shared expert's output.
TEST(SharedExpertGate, MoeMlpAddsTheGatedSharedExpert) {
  const std::int64_t d = 6, f = 4, width = 8;
  const RouterOptions router = softmax_router(4, 2);
  MoeMlp gated("m", d, f, router, make_gate(d, width), gate_init(), 1, 0);
  MoeMlp plain("m", d, f, router, nullptr, gate_init(), 1, 0);
  std::uint64_t seed = 900;
  for (auto& p : plain.params()) randomize(*p, ++seed, 0.0f, 0.5f);
  const auto plain_values = values_of(plain);
  for (auto& p : gated.params()) {
    const auto it = plain_values.find(p->name);
    if (it == plain_values.end()) continue;
    for (std::size_t i = 0; i < it->second.size(); ++i) p->value.data<float>()[i] = static_cast<float>(it->second[i]);
  }
  const Tensor x = random_tensor({2, 5, d}, 12);
  Context ctx;
  Stash s1, s2;
  const auto y = gated.forward(x, s1, ctx).to_floats();
  const auto y0 = plain.forward(x, s2, ctx).to_floats();
  const auto shared = ref_gated(values_of(gated), x, d, width);
  double worst = 0, shared_norm = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, std::abs(y[i] - y0[i] - shared[i]));
    shared_norm += shared[i] * shared[i];
  }
  EXPECT_GT(shared_norm, 0.0);
  EXPECT_LT(worst, 1e-5);
}

// Finite differences through the whole mixture (router, experts, gated shared expert, input); decisive routing
// (a large router weight) so that no token switches experts under the step.
TEST(SharedExpertGate, MoeMlpGradientsMatchFiniteDifferences) {
  const std::int64_t d = 5, f = 4;
  MoeMlp layer("m", d, f, softmax_router(4, 2), make_gate(d, 6), gate_init(), 1, 0);
  std::uint64_t seed = 700;
  for (auto& p : layer.params()) {
    randomize(*p, ++seed, 0.0f, p->name == "m.router.weight" ? 2.0f : 0.4f);
  }
  Context ctx;
  testing::GradCheck opt;
  opt.eps = 2e-3f;
  opt.tol = 3e-2;
  testing::check_gradients(layer, random_tensor({1, 6, d}, 22), ctx, opt);
}

TEST(SharedExpertGate, MoeBlockParameterNamesAndCount) {
  partition::MoeConfig c = testing::one_layer_moe();
  c.n_shared_experts = 2;
  c.shared_expert_gate = true;
  c.qkv_bias = true;
  c.normalize_top_k = false;
  EXPECT_EQ(testing::moe_block_params(c, gate_init()), (std::vector<std::string>{
                       "blocks.0.attn_norm.weight [8]", "blocks.0.attn.q.weight [8,8]", "blocks.0.attn.q.bias [8]",
                       "blocks.0.attn.k.weight [8,8]", "blocks.0.attn.k.bias [8]", "blocks.0.attn.v.weight [8,8]",
                       "blocks.0.attn.v.bias [8]", "blocks.0.attn.o.weight [8,8]", "blocks.0.mlp_norm.weight [8]",
                       "blocks.0.moe.router.weight [3,8]", "blocks.0.moe.experts.gate.weight [3,6,8]",
                       "blocks.0.moe.experts.up.weight [3,6,8]", "blocks.0.moe.experts.down.weight [3,8,6]",
                       "blocks.0.moe.shared.gate.weight [12,8]", "blocks.0.moe.shared.up.weight [12,8]",
                       "blocks.0.moe.shared.down.weight [8,12]", "blocks.0.moe.shared_gate.weight [1,8]"}));
}

TEST(SharedExpertGate, ConfigRefusesAGateWithoutSharedExperts) {
  partition::MoeConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.seq_len = 4;
  c.shared_expert_gate = true;
  try {
    partition::make_moe_spec(c);
    FAIL() << "a gate without shared experts was accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_NE(std::string(e.what()).find("model.shared_expert_gate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("n_shared_experts is 0"), std::string::npos) << e.what();
  }
}

// The host waits of one MoE layer and micro-batch (docs/cuda.md; the CPU counts the seam calls a GPU would wait
// on): the forward reads the router's logits back (and a sigmoid router's bias); the routing tables go up without a
// wait, and the backward routes from the forward's host copies, so it waits only for the weights' gradient and the
// logits' gradient upload. The gated shared expert adds its logit's read-back and two uploads in the forward, its
// gradient's read-back and one upload in the backward. A forward no backward follows waits once more, for the
// routing uploads whose staging it cannot keep.
struct Waits {
  std::int64_t forward = 0, backward = 0, forward_alone = 0;
};

Waits moe_host_waits(MoeMlp& layer, std::int64_t d) {
  ops::HostWaits counter;
  Context ctx;
  ctx.host_waits = &counter;
  const Tensor x = random_tensor({2, 5, d}, 31);
  Waits w;
  {
    Stash alone;
    alone.backward_follows = false;
    layer.forward(x, alone, ctx);
    w.forward_alone = counter.total();
  }
  const ops::HostWaits before = counter;
  Stash stash;
  const Tensor y = layer.forward(x, stash, ctx);
  const ops::HostWaits after_forward = counter;
  w.forward = after_forward.since(before).total();
  layer.backward(random_tensor(y.shape(), 32), stash, ctx);
  w.backward = counter.since(after_forward).total();
  EXPECT_EQ(counter.since(before).count(ops::HostWait::kSynchronize), w.forward + w.backward) << counter.str();
  return w;
}

TEST(MoeHostWaits, PerLayerAndMicroBatch) {
  const std::int64_t d = 5, f = 4;
  MoeMlp plain("m", d, f, softmax_router(4, 2), nullptr, gate_init(), 1, 0);
  const Waits p = moe_host_waits(plain, d);
  EXPECT_EQ(p.forward, 1);
  EXPECT_EQ(p.backward, 2);
  EXPECT_EQ(p.forward_alone, 2);

  RouterOptions sigmoid = softmax_router(4, 2);
  sigmoid.kind = partition::RouterKind::kSigmoid;
  MoeMlp biased("m", d, f, sigmoid, nullptr, gate_init(), 1, 0);
  const Waits b = moe_host_waits(biased, d);
  EXPECT_EQ(b.forward, 2);
  EXPECT_EQ(b.backward, 2);

  MoeMlp gated("m", d, f, softmax_router(4, 2), make_gate(d, 6), gate_init(), 1, 0);
  const Waits g = moe_host_waits(gated, d);
  EXPECT_EQ(g.forward, 1 + 3);
  EXPECT_EQ(g.backward, 2 + 2);
}

}  // namespace
}  // namespace cleave::layers::moe_shared_gate_test
