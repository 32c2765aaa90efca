// Test helpers for layers: random tensors, a random-projection scalar loss, central finite differences
// against a layer's backward_input / backward_weight, and the bytes a stash keeps alive.
//
// The finite-difference check runs in float (as the layers do) with a step of ~1e-2 and compares whole
// gradient vectors by relative L2 error, after asserting the analytic gradient is not all zeros, so a
// missing or mis-scaled gradient cannot pass.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/core/rng.hpp"
#include "engine/core/tensor.hpp"
#include "layers/layer.hpp"
#include "layers/models/builder.hpp"

namespace cleave::layers::testing {

// Build options with parameters on host memory: unit tests run without a run's memory cap.
inline BuildOptions on_host() { return BuildOptions{cpu_allocator()}; }

inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(t.data<float>(), t.numel(), seed, rng::hash_key("test-input"), 0.0f, scale);
  return t;
}

inline Tensor random_ids(const Shape& shape, std::int64_t vocab, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(rng::bits64(seed, rng::hash_key("test-ids"), static_cast<std::uint64_t>(i)) %
                                  static_cast<std::uint64_t>(vocab));
  }
  return t;
}

// Overwrite a Param's value with random numbers around `mean` (so gamma = 1, bias = 0 inits do not hide
// bugs).
inline void randomize(Param& p, std::uint64_t seed, float mean = 0.0f, float scale = 0.5f) {
  rng::fill_normal(p.value.data<float>(), p.value.numel(), seed, rng::hash_key(p.name), mean, scale);
}

inline double dot(const Tensor& y, const Tensor& r) {
  EXPECT_EQ(y.numel(), r.numel());
  double s = 0;
  const float* a = y.data<float>();
  const float* b = r.data<float>();
  for (std::int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return std::sqrt(num) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30});
}

inline std::vector<std::int64_t> sample_indices(std::int64_t n, int max_count, std::uint64_t seed) {
  std::vector<std::int64_t> idx;
  if (n <= max_count) {
    for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int i = 0; i < max_count; ++i) {
      idx.push_back(static_cast<std::int64_t>(rng::bits64(seed, 99, static_cast<std::uint64_t>(i)) %
                                              static_cast<std::uint64_t>(n)));
    }
  }
  return idx;
}

struct GradCheck {
  float eps = 1e-2f;
  double tol = 1e-2;
  int max_elements = 96;  // per tensor; larger tensors are sampled
};

// Numeric d(loss)/d(values[i]) for the sampled indices, loss() re-running the forward.
inline std::vector<double> numeric_grad(float* values, const std::vector<std::int64_t>& idx,
                                        const std::function<double()>& loss, float eps) {
  std::vector<double> out;
  for (std::int64_t i : idx) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double plus = loss();
    values[i] = saved - eps;
    const double minus = loss();
    values[i] = saved;
    out.push_back((plus - minus) / (2.0 * static_cast<double>(eps)));
  }
  return out;
}

// A loss layer with its targets bound, seen as a plain Layer (so the generic checks here can drive it).
class LossWithTargets final : public Layer {
 public:
  LossWithTargets(LossLayer& loss, Tensor targets) : loss_(loss), targets_(std::move(targets)) {}
  std::string_view kind() const override { return loss_.kind(); }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override {
    return loss_.forward(x, targets_, stash, ctx);
  }
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override {
    return loss_.backward_input(dy, stash, ctx);
  }
  void backward_weight(Stash& stash, Context& ctx) override { loss_.backward_weight(stash, ctx); }
  std::vector<std::shared_ptr<Param>> params() const override { return loss_.params(); }

 private:
  LossLayer& loss_;
  Tensor targets_;
};

// Checks backward_input (when x is f32) and backward_weight of `layer` at x by central differences of
// loss = Σ r ⊙ forward(x), r a fixed random projection. Param grads are zeroed first.
inline void check_gradients(Layer& layer, const Tensor& x, Context& ctx, const GradCheck& opt = {},
                            std::uint64_t seed = 5) {
  Stash stash;
  Tensor y = layer.forward(x, stash, ctx);
  Tensor r = random_tensor(y.shape(), seed + 1000);
  auto loss = [&] {
    Stash s;
    Tensor out = layer.forward(x, s, ctx);
    return dot(out, r);
  };
  for (auto& p : layer.params()) p->grad.zero_();
  Tensor dx = layer.backward_input(r, stash, ctx);
  layer.backward_weight(stash, ctx);
  EXPECT_TRUE(stash.empty()) << layer.kind() << ": backward_weight must release the stash";

  if (x.dtype() == DType::kF32) {
    ASSERT_TRUE(dx.defined());
    ASSERT_EQ(dx.shape(), x.shape());
    const auto idx = sample_indices(x.numel(), opt.max_elements, seed);
    std::vector<double> analytic;
    for (auto i : idx) analytic.push_back(dx.data<float>()[i]);
    const auto numeric = numeric_grad(x.data<float>(), idx, loss, opt.eps);
    double norm = 0;
    for (double a : analytic) norm += a * a;
    EXPECT_GT(norm, 0.0) << layer.kind() << ": input gradient is all zeros";
    EXPECT_LT(rel_l2(analytic, numeric), opt.tol) << layer.kind() << ": input gradient";
  }
  for (auto& p : layer.params()) {
    const auto idx = sample_indices(p->value.numel(), opt.max_elements, seed + 7);
    std::vector<double> analytic;
    for (auto i : idx) analytic.push_back(p->grad.data<float>()[i]);
    const auto numeric = numeric_grad(p->value.data<float>(), idx, loss, opt.eps);
    double norm = 0;
    for (double a : analytic) norm += a * a;
    EXPECT_GT(norm, 0.0) << layer.kind() << ": gradient of " << p->name << " is all zeros";
    EXPECT_LT(rel_l2(analytic, numeric), opt.tol) << layer.kind() << ": gradient of " << p->name;
  }
}

// Bytes of the distinct storages a stash (and its children) keeps alive.
inline void collect_storages(const Stash& stash, std::unordered_set<const Storage*>& seen, std::int64_t& bytes) {
  for (const Tensor& t : stash.tensors) {
    if (t.defined() && seen.insert(t.storage().get()).second) bytes += static_cast<std::int64_t>(t.storage()->bytes());
  }
  for (const Stash& child : stash.children) collect_storages(child, seen, bytes);
}
inline std::int64_t stash_bytes(const Stash& stash) {
  std::unordered_set<const Storage*> seen;
  std::int64_t bytes = 0;
  collect_storages(stash, seen, bytes);
  return bytes;
}

inline std::vector<float> grad_copy(const Layer& layer) {
  std::vector<float> out;
  for (auto& p : layer.params()) {
    auto g = p->grad.to_floats();
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

// Two micro-batches A and B through `layer` in the zero-bubble order F(A) F(B) I(A) I(B) W(B) W(A): both outputs,
// both input gradients and the accumulated weight gradients, concatenated (what recomputation must reproduce).
inline std::vector<float> run_zero_bubble_order(Layer& layer, Context& ctx, const Tensor& xa, const Tensor& xb,
                                                const Tensor& dya, const Tensor& dyb) {
  Stash sa, sb;
  std::vector<float> out = layer.forward(xa, sa, ctx).to_floats();
  const auto yb = layer.forward(xb, sb, ctx).to_floats();
  out.insert(out.end(), yb.begin(), yb.end());
  const auto dxa = layer.backward_input(dya, sa, ctx).to_floats();
  const auto dxb = layer.backward_input(dyb, sb, ctx).to_floats();
  layer.backward_weight(sb, ctx);
  layer.backward_weight(sa, ctx);
  out.insert(out.end(), dxa.begin(), dxa.end());
  out.insert(out.end(), dxb.begin(), dxb.end());
  for (float g : grad_copy(layer)) out.push_back(g);
  return out;
}

inline void zero_grads(const Layer& layer) {
  for (auto& p : layer.params()) p->grad.zero_();
}

}  // namespace cleave::layers::testing
