// AdamW and SGD against independent double-precision references over several steps with fresh random
// gradients; state allocation (category, once, nothing in step), tied-parameter dedup, no-decay params; the
// factory hands the optimizer section's hyperparameters on.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/rng.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/optim/optimizer_factory.hpp"

namespace cleave::optim::optimizer_test {
namespace {

std::shared_ptr<layers::Param> random_param(const std::string& name, const Shape& shape, bool weight_decay,
                                            std::uint64_t seed) {
  auto p = std::make_shared<layers::Param>();
  p->name = name;
  p->value = Tensor::empty(shape, DType::kF32, MemoryCategory::kParameters, cpu_allocator());
  p->grad = Tensor::zeros(shape, DType::kF32, MemoryCategory::kGradients, cpu_allocator());
  p->shard.logical = shape;
  p->weight_decay = weight_decay;
  rng::fill_normal(p->value.data<float>(), p->value.numel(), seed, rng::hash_key(name), 0.0f, 1.0f);
  return p;
}

void fill_grad(layers::Param& p, std::uint64_t step) {
  rng::fill_normal(p.grad.data<float>(), p.grad.numel(), 100 + step, rng::hash_key(p.name), 0.0f, 0.5f);
}

std::vector<double> to_double(const Tensor& t) {
  std::vector<double> out;
  for (float x : t.to_floats()) out.push_back(x);
  return out;
}

// PyTorch AdamW (decoupled decay, bias correction), double precision.
struct AdamRef {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, double lr, double b1, double b2, double eps, double wd, int t) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

// PyTorch SGD (coupled decay, dampening 0, buffer = g on the first step), double precision.
struct SgdRef {
  std::vector<double> p, buf;
  void step(const std::vector<float>& g, double lr, double mu, double wd, bool nesterov, bool first) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (mu != 0) {
        buf[i] = first ? d : mu * buf[i] + d;
        d = nesterov ? d + mu * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

void expect_close(const std::vector<double>& ref, const Tensor& got, double tol, const std::string& what) {
  const auto values = got.to_floats();
  ASSERT_EQ(values.size(), ref.size());
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::fabs(values[i] - ref[i]) / (1.0 + std::fabs(ref[i])));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  EXPECT_LT(max_err, tol) << what;
  EXPECT_GT(max_ref, 0.0) << what;
}

TEST(AdamW, MatchesDoubleReferenceOverSteps) {
  auto w = random_param("w", Shape{7, 13}, true, 1);
  auto b = random_param("b", Shape{13}, false, 1);
  const double lrs[] = {1e-2, 3e-3, 5e-2, 1e-3, 2e-2, 7e-3};
  const AdamWOptions options{0.85, 0.98, 1e-6, 0.1};
  AdamW opt({w, b, w}, options, cpu_allocator());  // w listed twice, as a tied head would: updated once
  EXPECT_EQ(opt.params().size(), 2u);
  AdamRef rw{to_double(w->value), std::vector<double>(91, 0), std::vector<double>(91, 0)};
  AdamRef rb{to_double(b->value), std::vector<double>(13, 0), std::vector<double>(13, 0)};
  for (int t = 1; t <= 6; ++t) {
    fill_grad(*w, t);
    fill_grad(*b, t);
    rw.step(w->grad.to_floats(), lrs[t - 1], 0.85, 0.98, 1e-6, 0.1, t);
    rb.step(b->grad.to_floats(), lrs[t - 1], 0.85, 0.98, 1e-6, 0.0, t);  // no decay for b
    opt.step(lrs[t - 1]);
    EXPECT_EQ(opt.steps_done(), t);
    expect_close(rw.p, w->value, 2e-6, "w at step " + std::to_string(t));
    expect_close(rb.p, b->value, 2e-6, "b at step " + std::to_string(t));
  }
  expect_close(rw.m, opt.state()[0].second, 2e-6, "exp_avg of w");
  EXPECT_EQ(opt.state()[0].first, "w.exp_avg");
  EXPECT_EQ(opt.state()[3].first, "b.exp_avg_sq");
}

TEST(Sgd, MatchesDoubleReferenceWithMomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    auto w = random_param("w", Shape{5, 3, 3}, true, 2);
    auto b = random_param("b", Shape{11}, false, 2);
    Sgd opt({w, b}, SgdOptions{0.9, 0.05, nesterov}, cpu_allocator());
    SgdRef rw{to_double(w->value), std::vector<double>(45, 0)};
    SgdRef rb{to_double(b->value), std::vector<double>(11, 0)};
    for (int t = 1; t <= 5; ++t) {
      fill_grad(*w, t);
      fill_grad(*b, t);
      const double lr = 0.1 / t;
      rw.step(w->grad.to_floats(), lr, 0.9, 0.05, nesterov, t == 1);
      rb.step(b->grad.to_floats(), lr, 0.9, 0.0, nesterov, t == 1);
      opt.step(lr);
      expect_close(rw.p, w->value, 1e-6, "w");
      expect_close(rb.p, b->value, 1e-6, "b");
    }
  }
}

TEST(Sgd, PlainSgdHasNoState) {
  auto w = random_param("w", Shape{9}, true, 3);
  Sgd opt({w}, SgdOptions{0.0, 0.0, false}, cpu_allocator());
  EXPECT_EQ(opt.state_bytes(), 0);
  SgdRef r{to_double(w->value), {}};
  fill_grad(*w, 1);
  r.step(w->grad.to_floats(), 0.3, 0.0, 0.0, false, true);
  opt.step(0.3);
  expect_close(r.p, w->value, 1e-6, "plain sgd");
}

TEST(Optimizer, StateAllocatedOnceInOptimizerCategory) {
  auto w = random_param("w", Shape{33, 17}, true, 4);
  auto b = random_param("b", Shape{17}, false, 4);
  Allocator& alloc = cpu_allocator();
  const std::int64_t before = alloc.stats().current_of(MemoryCategory::kOptimizerState);
  AdamW opt({w, b}, AdamWOptions{}, cpu_allocator());
  EXPECT_EQ(opt.state_bytes(), 2 * (33 * 17 + 17) * 4);
  EXPECT_EQ(alloc.stats().current_of(MemoryCategory::kOptimizerState) - before, opt.state_bytes());
  fill_grad(*w, 1);
  fill_grad(*b, 1);
  const auto requests = alloc.stats().requests;
  opt.step(1e-3);
  opt.zero_grad();
  EXPECT_EQ(alloc.stats().requests, requests) << "step() or zero_grad() allocated";
  for (float g : w->grad.to_floats()) ASSERT_EQ(g, 0.0f);
}

TEST(Optimizer, FactoryFollowsConfig) {
  auto w = random_param("w", Shape{6}, true, 5);
  config::OptimizerConfig c;
  c.type = config::OptimizerType::kSgd;
  c.momentum = 0.5;
  auto sgd = make_optimizer(c, {w}, cpu_allocator());
  EXPECT_NE(dynamic_cast<Sgd*>(sgd.get()), nullptr);
  EXPECT_EQ(sgd->state_bytes(), 6 * 4);
  EXPECT_EQ(sgd->state_bytes(), 6 * 4 * c.state_tensors_per_param());
  c.momentum = 0.0;
  EXPECT_EQ(make_optimizer(c, {w}, cpu_allocator())->state_bytes(), 0);
  EXPECT_EQ(c.state_tensors_per_param(), 0);
  c.type = config::OptimizerType::kAdamw;
  auto adamw = make_optimizer(c, {w}, cpu_allocator());
  EXPECT_NE(dynamic_cast<AdamW*>(adamw.get()), nullptr);
  EXPECT_EQ(adamw->state_bytes(), 2 * 6 * 4);
  EXPECT_EQ(adamw->state_bytes(), 6 * 4 * c.state_tensors_per_param());
}

// The factory hands every hyperparameter of the optimizer section to the optimizer it makes: optimizer.betas,
// eps and weight_decay (adamw), momentum, nesterov and weight_decay (sgd), each set away from its default, are
// the ones the double-precision reference steps with (a key the factory dropped would leave its default there,
// off by far more than the tolerance).
TEST(Optimizer, FactoryPassesTheSectionsHyperparameters) {
  config::OptimizerConfig c;
  c.betas = {0.5, 0.7};
  c.eps = 1e-2;
  c.weight_decay = 0.2;
  ASSERT_NE(c.betas, config::OptimizerConfig{}.betas);
  ASSERT_NE(c.eps, config::OptimizerConfig{}.eps);
  ASSERT_NE(c.weight_decay, config::OptimizerConfig{}.weight_decay);
  auto w = random_param("w", Shape{4, 5}, true, 7);
  auto adamw = make_optimizer(c, {w}, cpu_allocator());
  AdamRef ra{to_double(w->value), std::vector<double>(20, 0), std::vector<double>(20, 0)};
  for (int t = 1; t <= 3; ++t) {
    fill_grad(*w, t);
    ra.step(w->grad.to_floats(), 0.05, 0.5, 0.7, 1e-2, 0.2, t);
    adamw->step(0.05);
    expect_close(ra.p, w->value, 2e-6, "adamw from the config at step " + std::to_string(t));
  }

  c.type = config::OptimizerType::kSgd;
  c.momentum = 0.6;
  c.nesterov = true;
  ASSERT_NE(c.momentum, config::OptimizerConfig{}.momentum);
  auto v = random_param("v", Shape{4, 5}, true, 8);
  auto sgd = make_optimizer(c, {v}, cpu_allocator());
  SgdRef rs{to_double(v->value), std::vector<double>(20, 0)};
  for (int t = 1; t <= 3; ++t) {
    fill_grad(*v, t);
    rs.step(v->grad.to_floats(), 0.1, 0.6, 0.2, true, t == 1);
    sgd->step(0.1);
    expect_close(rs.p, v->value, 1e-6, "sgd from the config at step " + std::to_string(t));
  }
}

TEST(Optimizer, RejectsNonF32Params) {
  auto p = std::make_shared<layers::Param>();
  p->name = "table";
  p->value = Tensor::zeros(Shape{4}, DType::kI32, MemoryCategory::kParameters, cpu_allocator());
  p->grad = Tensor::zeros(Shape{4}, DType::kI32, MemoryCategory::kGradients, cpu_allocator());
  try {
    AdamW opt({p}, AdamWOptions{}, cpu_allocator());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("table"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::optim::optimizer_test
