// The mixture-of-experts layers: the router against an independent double-precision reference (softmax top-k
// with and without renormalisation, sigmoid with a selection bias; ties go to the LOWER expert index), the MoE
// feed-forward's output against a double reference of the whole computation (with shared experts), every
// gradient (router, experts, shared experts, input) by central finite differences of the output plus the aux and
// z losses, a micro-batch in which one expert receives every token and the others none, the routing uploads' staging
// against the memory plan's formula, and the moe block's parameter names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "kernels/ops/ops.hpp"
#include "layers/linear.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/moe/moe_block.hpp"
#include "layers/moe/moe_mlp.hpp"
#include "layers/moe/router.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/moe_staging.hpp"
#include "layer_test_util.hpp"
#include "moe_test_util.hpp"

namespace cleave::layers::moe_test {
namespace {

using partition::RouterKind;
using testing::random_tensor;
using testing::randomize;

// ---- the double reference ----------------------------------------------------------------------------------

struct RefRoute {
  std::vector<int> expert;     // [N·k]
  std::vector<double> weight;  // [N·k]
  std::vector<long> counts;    // [E]
  double aux = 0, z = 0;
};

RefRoute ref_route(const std::vector<double>& logits, std::int64_t n, std::int64_t e, std::int64_t k, RouterKind kind,
                   bool normalize, const std::vector<double>& bias, double aux_coef, double z_coef) {
  RefRoute r;
  r.counts.assign(static_cast<size_t>(e), 0);
  std::vector<double> mean_q(static_cast<size_t>(e), 0.0);
  for (std::int64_t t = 0; t < n; ++t) {
    std::vector<double> s(static_cast<size_t>(e));
    double mx = -1e300;
    for (std::int64_t i = 0; i < e; ++i) mx = std::max(mx, logits[static_cast<size_t>(t * e + i)]);
    double z = 0;
    for (std::int64_t i = 0; i < e; ++i) z += std::exp(logits[static_cast<size_t>(t * e + i)] - mx);
    const double lse = mx + std::log(z);
    r.z += z_coef * lse * lse / static_cast<double>(n);
    for (std::int64_t i = 0; i < e; ++i) {
      const double l = logits[static_cast<size_t>(t * e + i)];
      s[static_cast<size_t>(i)] = kind == RouterKind::kSoftmax ? std::exp(l - lse) : 1.0 / (1.0 + std::exp(-l));
    }
    const double total = std::accumulate(s.begin(), s.end(), 0.0);
    for (std::int64_t i = 0; i < e; ++i) mean_q[static_cast<size_t>(i)] += s[static_cast<size_t>(i)] / total / n;
    // Selection: repeatedly the largest key, the lowest index among equals.
    std::vector<bool> taken(static_cast<size_t>(e), false);
    std::vector<int> chosen;
    for (std::int64_t j = 0; j < k; ++j) {
      int best = -1;
      for (std::int64_t i = 0; i < e; ++i) {
        if (taken[static_cast<size_t>(i)]) continue;
        const double key = s[static_cast<size_t>(i)] + (bias.empty() ? 0.0 : bias[static_cast<size_t>(i)]);
        const double best_key =
            best < 0 ? -1e300 : s[static_cast<size_t>(best)] + (bias.empty() ? 0.0 : bias[static_cast<size_t>(best)]);
        if (key > best_key) best = static_cast<int>(i);
      }
      taken[static_cast<size_t>(best)] = true;
      chosen.push_back(best);
    }
    double sum = 0;
    for (int c : chosen) sum += s[static_cast<size_t>(c)];
    std::sort(chosen.begin(), chosen.end());  // slots listed by expert index (router.hpp)
    for (int c : chosen) {
      r.expert.push_back(c);
      r.weight.push_back(normalize ? s[static_cast<size_t>(c)] / sum : s[static_cast<size_t>(c)]);
      ++r.counts[static_cast<size_t>(c)];
    }
  }
  for (std::int64_t i = 0; i < e; ++i) {
    r.aux += aux_coef * static_cast<double>(e) * static_cast<double>(r.counts[static_cast<size_t>(i)]) /
             static_cast<double>(n * k) * mean_q[static_cast<size_t>(i)];
  }
  return r;
}

std::vector<double> to_double(const Tensor& t) {
  const auto f = t.to_floats();
  return {f.begin(), f.end()};
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// y = Σ_j w_j expert_{e_j}(x) (+ shared(x)); params by name.
struct RefMoe {
  std::vector<double> y;
  RefRoute route;
};

RefMoe ref_moe(const MoeMlp& layer, const Tensor& x, std::int64_t d, std::int64_t f, std::int64_t s_width) {
  std::map<std::string, std::vector<double>> p;
  for (const auto& param : layer.params()) p[param->name] = to_double(param->value);
  const RouterOptions& o = layer.router_options();
  const std::int64_t n = x.numel() / d, e = o.experts;
  const auto xs = to_double(x);
  const auto find = [&](const std::string& suffix) -> const std::vector<double>& {
    for (const auto& [name, v] : p) {
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return v;
    }
    static const std::vector<double> none;
    return none;
  };
  const auto& wr = find(".router.weight");
  std::vector<double> logits(static_cast<size_t>(n * e), 0.0);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t i = 0; i < e; ++i)
      for (std::int64_t c = 0; c < d; ++c)
        logits[static_cast<size_t>(t * e + i)] += xs[static_cast<size_t>(t * d + c)] * wr[static_cast<size_t>(i * d + c)];
  RefMoe out;
  out.route = ref_route(logits, n, e, o.top_k, o.kind, o.normalize, find(".router.bias"), o.aux_coef, o.z_coef);
  const auto& wg = find(".experts.gate.weight");
  const auto& wu = find(".experts.up.weight");
  const auto& wd = find(".experts.down.weight");
  out.y.assign(static_cast<size_t>(n * d), 0.0);
  const auto swiglu = [&](const double* xt, const double* g, const double* u, const double* dn, std::int64_t width,
                          double scale, double* y) {
    std::vector<double> h(static_cast<size_t>(width));
    for (std::int64_t j = 0; j < width; ++j) {
      double a = 0, b = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        a += xt[c] * g[j * d + c];
        b += xt[c] * u[j * d + c];
      }
      h[static_cast<size_t>(j)] = silu(a) * b;
    }
    for (std::int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (std::int64_t j = 0; j < width; ++j) acc += dn[c * width + j] * h[static_cast<size_t>(j)];
      y[c] += scale * acc;
    }
  };
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t j = 0; j < o.top_k; ++j) {
      const auto slot = static_cast<size_t>(t * o.top_k + j);
      const std::int64_t ex = out.route.expert[slot];
      swiglu(&xs[static_cast<size_t>(t * d)], &wg[static_cast<size_t>(ex * f * d)], &wu[static_cast<size_t>(ex * f * d)],
             &wd[static_cast<size_t>(ex * d * f)], f, out.route.weight[slot], &out.y[static_cast<size_t>(t * d)]);
    }
    if (s_width > 0) {
      swiglu(&xs[static_cast<size_t>(t * d)], find(".shared.gate.weight").data(), find(".shared.up.weight").data(),
             find(".shared.down.weight").data(), s_width, 1.0, &out.y[static_cast<size_t>(t * d)]);
    }
  }
  return out;
}

// ---- building the layer ------------------------------------------------------------------------------------

ParamInit moe_init() {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 41;
  return init;
}

std::unique_ptr<MoeMlp> make_moe(std::int64_t d, std::int64_t f, const RouterOptions& router, std::int64_t shared) {
  LayerPtr s;
  const ParamInit init = moe_init();
  if (shared > 0) {
    s = std::make_unique<SwigluMlp>("m.shared", std::make_unique<Linear>("m.shared.gate", d, shared, false, init),
                                    std::make_unique<Linear>("m.shared.up", d, shared, false, init),
                                    std::make_unique<Linear>("m.shared.down", shared, d, false, init), false);
  }
  auto layer = std::make_unique<MoeMlp>("m", d, f, router, std::move(s), init, 1, 0);
  std::uint64_t seed = 300;
  for (auto& p : layer->params()) {
    if (p->name != "m.router.bias") randomize(*p, ++seed, 0.0f, 0.4f);
  }
  return layer;
}

RouterOptions options(RouterKind kind, std::int64_t e, std::int64_t k, bool normalize, double aux = 0.0,
                      double z = 0.0) {
  RouterOptions o;
  o.kind = kind;
  o.experts = e;
  o.top_k = k;
  o.normalize = normalize;
  o.aux_coef = aux;
  o.z_coef = z;
  return o;
}

// ---- the router ---------------------------------------------------------------------------------------------

TEST(MoeRouter, MatchesTheDoubleReference) {
  const std::int64_t n = 9, e = 5;
  const Tensor lt = random_tensor({n, e}, 3, 1.5f);
  const auto logits = lt.to_floats();
  std::vector<double> ld(logits.begin(), logits.end());
  for (RouterKind kind : {RouterKind::kSoftmax, RouterKind::kSigmoid}) {
    for (bool normalize : {false, true}) {
      for (std::int64_t k : {1, 2, 5}) {
        const std::vector<float> bias = kind == RouterKind::kSigmoid ? std::vector<float>{0.f, 0.3f, -0.2f, 0.f, 0.5f}
                                                                     : std::vector<float>{};
        const Routing r = route(logits, bias, options(kind, e, k, normalize, 0.02, 0.003));
        const RefRoute ref = ref_route(ld, n, e, k, kind, normalize, std::vector<double>(bias.begin(), bias.end()),
                                       0.02, 0.003);
        for (std::int64_t i = 0; i < n * k; ++i) {
          EXPECT_EQ(r.expert[static_cast<size_t>(i)], ref.expert[static_cast<size_t>(i)]) << "slot " << i;
          EXPECT_NEAR(r.weight[static_cast<size_t>(i)], ref.weight[static_cast<size_t>(i)], 1e-6);
        }
        for (std::int64_t i = 0; i < e; ++i) EXPECT_EQ(r.counts[static_cast<size_t>(i)], ref.counts[static_cast<size_t>(i)]);
        EXPECT_NEAR(r.aux_loss, ref.aux, 1e-9);
        EXPECT_NEAR(r.z_loss, ref.z, 1e-9);
        // Rows grouped per expert, tokens ascending, and the two maps inverse to each other.
        for (std::int64_t i = 0; i < n * k; ++i) {
          const auto row = static_cast<size_t>(r.token_row[static_cast<size_t>(i)]);
          EXPECT_EQ(r.row_token[row], i / k);
          EXPECT_EQ(r.row_weight[row], r.weight[static_cast<size_t>(i)]);
        }
      }
    }
  }
}

// The layer refills one Routing and one RouterWorkspace every call (route_into, router_backward_into): whatever an
// earlier call left in them (more tokens, another router kind, a bias, balance_over's counts, a z loss), the refilled
// routing and the logits' gradient equal a fresh route() and router_backward() bit for bit, every field.
void expect_same_routing(const Routing& got, const Routing& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.experts, want.experts) << what;
  EXPECT_EQ(got.top_k, want.top_k) << what;
  EXPECT_EQ(got.expert, want.expert) << what;
  EXPECT_EQ(got.weight, want.weight) << what;
  EXPECT_EQ(got.counts, want.counts) << what;
  EXPECT_EQ(got.row_token, want.row_token) << what;
  EXPECT_EQ(got.token_row, want.token_row) << what;
  EXPECT_EQ(got.row_weight, want.row_weight) << what;
  EXPECT_EQ(got.scores, want.scores) << what;
  EXPECT_EQ(got.lse, want.lse) << what;
  EXPECT_EQ(got.logits, want.logits) << what;
  EXPECT_EQ(got.mean_q, want.mean_q) << what;
  EXPECT_EQ(got.balance_counts, want.balance_counts) << what;
  EXPECT_EQ(got.balance_tokens, want.balance_tokens) << what;
  EXPECT_EQ(got.aux_loss, want.aux_loss) << what;
  EXPECT_EQ(got.z_loss, want.z_loss) << what;
}

TEST(MoeRouter, RoutingIntoAReusedWorkspaceEqualsAFreshOne) {
  const auto big = random_tensor({12, 6}, 21, 1.5f).to_floats();
  const auto small = random_tensor({5, 4}, 22, 1.5f).to_floats();
  const std::vector<float> bias6 = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.1f};
  const auto dweight_big = random_tensor({12, 3}, 23, 0.5f).to_floats();
  const auto dweight_small = random_tensor({5, 2}, 24, 0.5f).to_floats();
  Routing reused;
  RouterWorkspace ws;
  // First a large sigmoid routing with a bias, z loss and whole-micro-batch counts, and its backward.
  const RouterOptions sig = options(RouterKind::kSigmoid, 6, 3, true, 0.05, 0.01);
  route_into(reused, ws, big, bias6, sig);
  balance_over(reused, std::vector<std::int64_t>{9, 1, 7, 3, 8, 8}, 24, sig);
  const std::vector<bool> mask = {true, false, true, true, false, true, true, true, false, true, true, true};
  const std::span<const float> got_big = router_backward_into(ws, reused, dweight_big, 0.5, sig, mask);
  Routing fresh_big = route(big, bias6, sig);
  balance_over(fresh_big, std::vector<std::int64_t>{9, 1, 7, 3, 8, 8}, 24, sig);
  expect_same_routing(reused, fresh_big, "sigmoid, 12 tokens");
  const std::vector<float> want_big = router_backward(fresh_big, dweight_big, 0.5, sig, mask);
  EXPECT_EQ(std::vector<float>(got_big.begin(), got_big.end()), want_big);
  // Then a smaller softmax routing without bias or z loss into the same two.
  const RouterOptions soft = options(RouterKind::kSoftmax, 4, 2, false, 0.02);
  route_into(reused, ws, small, {}, soft);
  const Routing fresh_small = route(small, {}, soft);
  expect_same_routing(reused, fresh_small, "softmax, 5 tokens after sigmoid, 12");
  const std::span<const float> got_small = router_backward_into(ws, reused, dweight_small, 1.0, soft);
  EXPECT_EQ(std::vector<float>(got_small.begin(), got_small.end()),
            router_backward(fresh_small, dweight_small, 1.0, soft));
  // And no token at all: the losses and balance back to zero.
  route_into(reused, ws, std::span<const float>(), {}, soft);
  expect_same_routing(reused, route(std::span<const float>(), {}, soft), "no token");
  EXPECT_EQ(reused.aux_loss, 0.0);
  EXPECT_TRUE(reused.balance_counts.empty());
}

// Context parallelism: two ranks each route half of a micro-batch's tokens. With the whole micro-batch's counts
// (balance_over), the halves' aux losses average to the whole's and their logit gradients, each at half the loss
// scale (the cp ranks' scale is 1 / cp of one rank's), are the whole's rows. With only their own counts (f_e of
// half the tokens, what each rank had before balance_over) they do not average to the whole's when the halves route
// unlike each other (the first half leans to expert 0, the second to the last): checked too, so the case can fail.
TEST(MoeRouter, HalvesBalancedOverTheWholeGiveTheWholeAuxLossAndGradient) {
  const std::int64_t n = 8, e = 4, k = 2, half = n / 2;
  auto logits = random_tensor({n, e}, 7, 1.5f).to_floats();
  // Unlike halves: the first leans to expert 0, the second to the last.
  for (std::int64_t t = 0; t < n; ++t) logits[static_cast<size_t>(t * e + (t < half ? 0 : e - 1))] += 3.0f;
  const auto dweight = random_tensor({n, k}, 8, 0.5f).to_floats();
  for (RouterKind kind : {RouterKind::kSoftmax, RouterKind::kSigmoid}) {
    const RouterOptions o = options(kind, e, k, true, 0.05, 0.01);
    const Routing whole = route(logits, {}, o);
    const std::vector<float> want = router_backward(whole, dweight, 1.0, o);
    double aux = 0, aux_own_counts = 0;
    for (std::int64_t h = 0; h < 2; ++h) {
      const auto rows = [&](const std::vector<float>& v, std::int64_t width) {
        const auto first = static_cast<size_t>(h * half * width), count = static_cast<size_t>(half * width);
        return std::span<const float>(v).subspan(first, count);
      };
      Routing part = route(rows(logits, e), {}, o);
      aux_own_counts += part.aux_loss / 2;
      balance_over(part, whole.counts, n, o);
      aux += part.aux_loss / 2;
      const std::vector<float> got = router_backward(part, rows(dweight, k), 0.5, o);
      for (std::int64_t i = 0; i < half * e; ++i) {
        EXPECT_NEAR(got[static_cast<size_t>(i)], want[static_cast<size_t>(h * half * e + i)], 1e-7)
            << "half " << h << ", element " << i;
      }
    }
    EXPECT_NEAR(aux, whole.aux_loss, 1e-12);
    EXPECT_GT(std::abs(aux_own_counts - whole.aux_loss), 1e-4 * whole.aux_loss);
  }
}

TEST(MoeRouter, TiesGoToTheLowerExpertIndex) {
  // Token 0: experts 1, 2, 3 tie for first; token 1: all four tie.
  const std::vector<float> logits = {0.5f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const Routing r = route(logits, {}, options(RouterKind::kSoftmax, 4, 2, true));
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{1, 2, 0, 1}));
  EXPECT_EQ(r.counts, (std::vector<std::int64_t>{1, 2, 1, 0}));
  EXPECT_DOUBLE_EQ(load_imbalance(r.counts), 2.0);
}

TEST(MoeRouter, SigmoidBiasChoosesButDoesNotWeigh) {
  const std::vector<float> logits = {2.0f, 0.0f, -1.0f};
  const Routing r = route(logits, std::vector<float>{0.0f, 0.0f, 5.0f}, options(RouterKind::kSigmoid, 3, 1, false));
  EXPECT_EQ(r.expert[0], 2);
  EXPECT_NEAR(r.weight[0], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
}

// The combine's order (issue 36): a token's k outputs are summed in f32 by expert index, not by score. Token 0
// scores experts 3 > 0 > 2 > 1 (expert 3 at about twice expert 0's weight); its slots must list 0, 2, 3, and
// moe_combine over the routing must equal the f32 sum (w0·o0 + w2·o2) + w3·o3 bit for bit. The outputs are powers of
// two (every product w·o exact, so the expected value does not depend on fused multiply-adds): by index, w2·1 is lost
// against w0·2^25 before w3·(-2^24) cancels it; by score the two large terms cancel first (exactly) and w2 survives,
// so the orders differ (checked: the test can fail).
TEST(MoeRouter, CombineSumsByTokenThenExpertIndex) {
  const std::vector<float> logits = {0.0f, -3.0f, -1.0f, 0.6931472f};
  const Routing r = route(logits, {}, options(RouterKind::kSoftmax, 4, 3, true));
  ASSERT_EQ(r.expert, (std::vector<std::int32_t>{0, 2, 3}));
  const std::map<std::int32_t, float> out_of = {{0, 33554432.0f}, {2, 1.0f}, {3, -16777216.0f}};  // 2^25, 1, -2^24
  std::vector<float> src(3);  // routed rows: one per chosen expert, in row order
  for (size_t j = 0; j < 3; ++j) src[static_cast<size_t>(r.token_row[j])] = out_of.at(r.expert[j]);
  const auto w = [&](std::int32_t expert) {
    for (int j = 0; j < 3; ++j) {
      if (r.expert[static_cast<size_t>(j)] == expert) return r.weight[static_cast<size_t>(j)];
    }
    return 0.0f;
  };
  volatile float by_index = 0.0f, by_score = 0.0f;  // volatile: each step rounded to f32
  for (std::int32_t x : {0, 2, 3}) by_index = by_index + w(x) * out_of.at(x);
  for (std::int32_t x : {3, 0, 2}) by_score = by_score + w(x) * out_of.at(x);
  ASSERT_NE(by_index, by_score) << "the two orders must round differently for this test to mean anything";
  Tensor src_t = Tensor::empty({3, 1}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor rows_t = Tensor::empty({1, 3}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  Tensor weight_t = Tensor::empty({1, 3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  for (int j = 0; j < 3; ++j) {
    src_t.data<float>()[j] = src[static_cast<size_t>(j)];
    rows_t.data<std::int32_t>()[j] = r.token_row[static_cast<size_t>(j)];
    weight_t.data<float>()[j] = r.weight[static_cast<size_t>(j)];
  }
  Tensor out = Tensor::zeros({1, 1}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Context ctx;
  ops::moe_combine(ctx, src_t, rows_t, weight_t, out);
  EXPECT_EQ(out.data<float>()[0], by_index);
}

// ---- the feed-forward ---------------------------------------------------------------------------------------

struct Case {
  RouterKind kind;
  std::int64_t e, k;
  bool normalize;
  std::int64_t shared;
};

TEST(MoeMlp, ForwardMatchesTheDoubleReference) {
  const std::int64_t d = 6, f = 5;
  for (const Case& c : {Case{RouterKind::kSoftmax, 4, 2, true, 0}, Case{RouterKind::kSoftmax, 5, 1, false, 3},
                        Case{RouterKind::kSigmoid, 4, 2, true, 4}, Case{RouterKind::kSigmoid, 3, 3, false, 0}}) {
    auto layer = make_moe(d, f, options(c.kind, c.e, c.k, c.normalize), c.shared);
    Context ctx;
    const Tensor x = random_tensor({2, 7, d}, 11);
    Stash stash;
    const auto y = layer->forward(x, stash, ctx).to_floats();
    const RefMoe ref = ref_moe(*layer, x, d, f, c.shared);
    ASSERT_EQ(y.size(), ref.y.size());
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref.y[i]));
    EXPECT_LT(worst, 2e-5) << "router " << static_cast<int>(c.kind) << " E " << c.e << " k " << c.k;
  }
}

// Finite differences of loss = Σ r ⊙ y + aux + z (the router's losses recomputed from the perturbed logits).
void check_moe_gradients(MoeMlp& layer, const Tensor& x, std::int64_t d, double tol) {
  Context ctx;
  Stash stash;
  Tensor y = layer.forward(x, stash, ctx);
  const Tensor r = random_tensor(y.shape(), 1234);
  std::shared_ptr<Param> router;
  for (const auto& p : layer.params()) {
    if (p->name == "m.router.weight") router = p;
  }
  const RouterOptions& o = layer.router_options();
  std::vector<float> bias;
  for (const auto& p : layer.params()) {
    if (p->name == "m.router.bias") bias = p->value.to_floats();
  }
  const auto loss = [&] {
    Stash s;
    const Tensor out = layer.forward(x, s, ctx);
    const std::int64_t n = x.numel() / d;
    std::vector<float> logits(static_cast<size_t>(n * o.experts), 0.0f);
    const float* xs = x.data<float>();
    const float* w = router->value.data<float>();
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t i = 0; i < o.experts; ++i) {
        double acc = 0;
        for (std::int64_t c = 0; c < d; ++c) acc += static_cast<double>(xs[t * d + c]) * w[i * d + c];
        logits[static_cast<size_t>(t * o.experts + i)] = static_cast<float>(acc);
      }
    const Routing routing = route(logits, bias, o);
    return testing::dot(out, r) + routing.aux_loss + routing.z_loss;
  };
  for (auto& p : layer.params()) p->grad.zero_();
  const Tensor dx = layer.backward_input(r, stash, ctx);
  layer.backward_weight(stash, ctx);
  EXPECT_TRUE(stash.empty());
  const float eps = 2e-3f;
  {
    const auto idx = testing::sample_indices(x.numel(), 64, 3);
    std::vector<double> analytic;
    for (auto i : idx) analytic.push_back(dx.data<float>()[i]);
    const auto numeric = testing::numeric_grad(x.data<float>(), idx, loss, eps);
    EXPECT_LT(testing::rel_l2(analytic, numeric), tol) << "input gradient";
  }
  for (const auto& p : layer.params()) {
    if (p->name == "m.router.bias") continue;  // selection only: no gradient
    const auto idx = testing::sample_indices(p->value.numel(), 96, 9);
    std::vector<double> analytic;
    for (auto i : idx) analytic.push_back(p->grad.data<float>()[i]);
    const auto numeric = testing::numeric_grad(p->value.data<float>(), idx, loss, eps);
    double norm = 0;
    for (double a : analytic) norm += a * a;
    EXPECT_GT(norm, 0.0) << p->name << ": all zeros";
    EXPECT_LT(testing::rel_l2(analytic, numeric), tol) << p->name;
  }
}

// Tokens whose top-k choice is close to a tie would switch experts under the step; the inputs here are chosen
// (seeded) so that none does, and each case is checked for it: the routing under every perturbation of the
// input would be visible as a jump far above the tolerance.
TEST(MoeMlp, GradientsMatchFiniteDifferences) {
  const std::int64_t d = 5, f = 4;
  for (const Case& c : {Case{RouterKind::kSoftmax, 4, 2, true, 0}, Case{RouterKind::kSoftmax, 4, 1, false, 3},
                        Case{RouterKind::kSigmoid, 4, 2, true, 2}, Case{RouterKind::kSigmoid, 3, 2, false, 0}}) {
    auto layer = make_moe(d, f, options(c.kind, c.e, c.k, c.normalize, 0.3, 0.05), c.shared);
    for (auto& p : layer->params()) {
      if (p->name == "m.router.weight") randomize(*p, 77, 0.0f, 2.0f);  // decisive routing: no flips under the step
    }
    SCOPED_TRACE(::testing::Message() << "router " << static_cast<int>(c.kind) << " k " << c.k << " shared "
                                      << c.shared);
    check_moe_gradients(*layer, random_tensor({1, 6, d}, 21), d, 3e-2);
  }
}

// Expert 2 gets every token, experts 0, 1 and 3 none: their GEMMs are skipped, their gradients are exactly
// zero, and the output and the remaining gradients are right.
TEST(MoeMlp, OneExpertTakesEveryTokenAndAnotherNone) {
  const std::int64_t d = 4, f = 3, e = 4;
  auto layer = make_moe(d, f, options(RouterKind::kSoftmax, e, 1, false, 0.1), 0);
  std::shared_ptr<Param> router;
  for (const auto& p : layer->params()) {
    if (p->name == "m.router.weight") router = p;
  }
  router->value.zero_();
  for (std::int64_t c = 0; c < d; ++c) router->value.data<float>()[2 * d + c] = 1.0f;
  Tensor x = random_tensor({1, 5, d}, 8, 0.3f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::abs(x.data<float>()[i]) + 0.5f;
  Context ctx;
  Stash stash;
  const auto y = layer->forward(x, stash, ctx).to_floats();
  const RefMoe ref = ref_moe(*layer, x, d, f, 0);
  EXPECT_EQ(ref.route.counts, (std::vector<long>{0, 0, 5, 0}));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref.y[i], 1e-5);
  for (auto& p : layer->params()) p->grad.zero_();
  layer->backward(random_tensor({1, 5, d}, 9), stash, ctx);
  EXPECT_EQ(layer->stats().counts, (std::vector<std::int64_t>{0, 0, 5, 0}));
  EXPECT_DOUBLE_EQ(load_imbalance(layer->stats().counts), 4.0);
  for (const auto& p : layer->params()) {
    if (p->name.find(".experts.") == std::string::npos) continue;
    const auto g = p->grad.to_floats();
    const std::int64_t per = p->value.numel() / e;
    for (std::int64_t ex = 0; ex < e; ++ex) {
      double norm = 0;
      for (std::int64_t i = 0; i < per; ++i) norm += std::abs(g[static_cast<size_t>(ex * per + i)]);
      if (ex == 2) {
        EXPECT_GT(norm, 0.0) << p->name << " expert 2";
      } else {
        EXPECT_EQ(norm, 0.0) << p->name << " expert " << ex << " received no token";
      }
    }
  }
  check_moe_gradients(*layer, x, d, 3e-2);
}

// The routing uploads' staging (partition/families/moe_staging.hpp, the memory plan's host_pinned line): a context with a
// staging allocator of its own (a GPU's is page-locked; here a counting CPU allocator, which the layer then treats
// as a GPU's) holds the formula's bytes per micro-batch from the forward to the end of backward_input, and a
// forward no backward follows (full recomputation's first, evaluation's) only until its copies are done.
TEST(MoeMlp, UploadStagingIsThePlansFormula) {
  const std::int64_t d = 6, f = 5, e = 4, k = 2, micro = 2, t = 7;
  auto layer = make_moe(d, f, options(RouterKind::kSoftmax, e, k, true, 0.01), 0);
  partition::BlockSpec block;
  block.kind = partition::BlockKind::kMoeBlock;
  block.n_experts = e;
  block.top_k = k;
  block.seq_len = t;
  block.aux_loss = true;
  const partition::MoeUploadStaging per = partition::moe_upload_staging(block, micro, 1, 1);
  EXPECT_EQ(per.uploads, 16 * micro * t * k);
  EXPECT_EQ(per.balance + per.dispatch, 0);  // cp 1, ep 1
  const std::unique_ptr<Allocator> staging = make_cpu_allocator();
  Context ctx;
  ctx.upload_staging = staging.get();
  const auto live = [&] { return staging->stats().current_total; };
  Stash first, second;
  layer->forward(random_tensor({micro, t, d}, 1), first, ctx);
  EXPECT_EQ(live(), per.held());
  layer->forward(random_tensor({micro, t, d}, 2), second, ctx);
  EXPECT_EQ(live(), 2 * per.held());
  EXPECT_EQ(staging->stats().requests, 8);  // four uploads a forward
  layer->backward_input(random_tensor({micro, t, d}, 3), first, ctx);
  EXPECT_EQ(live(), per.held());
  layer->backward_weight(first, ctx);
  layer->backward_input(random_tensor({micro, t, d}, 4), second, ctx);
  layer->backward_weight(second, ctx);
  EXPECT_EQ(live(), 0);
  EXPECT_EQ(staging->stats().peak_total, 2 * per.held());
  staging->reset_peak();
  Stash dropped;
  dropped.backward_follows = false;
  layer->forward(random_tensor({micro, t, d}, 5), dropped, ctx);
  EXPECT_EQ(live(), 0);
  EXPECT_EQ(staging->stats().peak_total, per.uploads);
}

TEST(MoeBlock, ParameterNamesAndShapes) {
  partition::MoeConfig c = testing::one_layer_moe();
  c.n_shared_experts = 1;
  c.router = RouterKind::kSigmoid;
  ASSERT_EQ(partition::make_moe_spec(c).blocks[1].kind, partition::BlockKind::kMoeBlock);
  // The count the listing checks against the cost model's includes every expert.
  EXPECT_EQ(testing::moe_block_params(c, moe_init()), (std::vector<std::string>{
                       "blocks.0.attn_norm.weight [8]", "blocks.0.attn.q.weight [8,8]", "blocks.0.attn.k.weight [8,8]",
                       "blocks.0.attn.v.weight [8,8]", "blocks.0.attn.o.weight [8,8]", "blocks.0.mlp_norm.weight [8]",
                       "blocks.0.moe.router.weight [3,8]", "blocks.0.moe.router.bias [3]",
                       "blocks.0.moe.experts.gate.weight [3,6,8]", "blocks.0.moe.experts.up.weight [3,6,8]",
                       "blocks.0.moe.experts.down.weight [3,8,6]", "blocks.0.moe.shared.gate.weight [6,8]",
                       "blocks.0.moe.shared.up.weight [6,8]", "blocks.0.moe.shared.down.weight [8,6]"}));
}

}  // namespace
}  // namespace cleave::layers::moe_test
