// Global gradient norm (double reference, each Param once, reducer and filter hooks) and clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/rng.hpp"
#include "engine/optim/grad_clip.hpp"

namespace cleave::optim::grad_clip_test {
namespace {

std::shared_ptr<layers::Param> param_with_grad(const std::string& name, std::int64_t n, std::uint64_t seed) {
  auto p = std::make_shared<layers::Param>();
  p->name = name;
  p->value = Tensor::zeros(Shape{n}, DType::kF32, MemoryCategory::kParameters, cpu_allocator());
  p->grad = Tensor::empty(Shape{n}, DType::kF32, MemoryCategory::kGradients, cpu_allocator());
  rng::fill_normal(p->grad.data<float>(), n, seed, rng::hash_key(name), 0.1f, 2.0f);
  return p;
}

double sum_sq(const layers::Param& p) {
  double s = 0;
  for (float g : p.grad.to_floats()) s += double(g) * g;
  return s;
}

TEST(GradNorm, EachParamOnceAndHooks) {
  // 200003 elements: several chunks with a ragged tail.
  auto a = param_with_grad("a", 200003, 1);
  auto b = param_with_grad("b", 37, 2);
  const ParamList params = {a, b, a};
  const double expected = std::sqrt(sum_sq(*a) + sum_sq(*b));
  EXPECT_GT(expected, 0.0);
  EXPECT_NEAR(global_grad_norm(params), expected, 1e-12 * expected);
  // A reducer standing in for an all-reduce over 3 ranks holding the same local sum.
  int calls = 0;
  const double reduced = global_grad_norm(params, [&](const std::vector<double>& local) {
    ++calls;
    std::vector<double> sum = local;
    for (double& v : sum) v *= 3.0;
    return sum;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_NEAR(reduced, expected * std::sqrt(3.0), 1e-12 * expected);
  // A filter leaving out b (e.g. a replicated copy another rank counts).
  const double only_a = global_grad_norm(params, {}, [](const layers::Param& p) { return p.name != "b"; });
  EXPECT_NEAR(only_a, std::sqrt(sum_sq(*a)), 1e-12 * expected);
}

TEST(GradNorm, ClipScalesToMaxNorm) {
  auto a = param_with_grad("a", 1001, 3);
  auto b = param_with_grad("b", 13, 4);
  const ParamList params = {a, b};
  const double norm = global_grad_norm(params);
  const double max_norm = norm / 4.0;
  const auto before = a->grad.to_floats();
  const double scale = clip_grads(params, max_norm, norm);
  EXPECT_NEAR(scale, max_norm / (norm + 1e-6), 1e-15);
  EXPECT_NEAR(global_grad_norm(params), max_norm, 1e-5 * max_norm);
  EXPECT_FLOAT_EQ(a->grad.to_floats()[17], static_cast<float>(before[17] * scale));
  // Below the threshold, off, or non-finite: untouched.
  const auto kept = a->grad.to_floats();
  EXPECT_EQ(clip_grads(params, max_norm * 2, max_norm), 1.0);
  EXPECT_EQ(clip_grads(params, 0.0, max_norm), 1.0);
  EXPECT_EQ(clip_grads(params, 1e-3, std::nan("")), 1.0);
  EXPECT_EQ(a->grad.to_floats(), kept);
}

}  // namespace
}  // namespace cleave::optim::grad_clip_test
