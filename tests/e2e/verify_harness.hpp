// The one-rank runs `cleave verify`'s bound tests train (verify_bf16_test.cpp, verify_bounds_test.cpp): an injecting
// CPU backend (the CPU table with the optimizer slots wrapped: a gradient scaled, or part of a step added to one
// element, or the loss scaled) and a one-rank trainer loop that keeps the initial and final parameters, the losses
// and, for AdamW's per-element bound, the sensitivity from the optimizer's v after each step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/train/trainer.hpp"
#include "engine/train/verify.hpp"
#include "kernels/ops/backend.hpp"
#include "mpi/mpi_test_env.hpp"

namespace cleave::testing {

// The CPU table whose optimizer slots hit the update item of `target` elements: its gradient scaled by grad_scale
// before the update, step_error x lr added to its element 0 after it.
struct InjectingBackend : ops::Backend {
  std::int64_t target = 0;
  float grad_scale = 1;
  float step_error = 0;
  float loss_scale = 1;  // the forward's loss (the mean over the step's tokens) times this
};

inline void injected_loss(const ops::Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                          const Tensor& loss) {
  ops::cpu_backend().cross_entropy_forward(ctx, logits, targets, lse, loss);
  loss.data<float>()[0] *= static_cast<const InjectingBackend&>(*ctx.backend).loss_scale;
}

template <class Item>
const Item* target_item(std::span<const Item> items, std::int64_t target) {
  auto it = std::find_if(items.begin(), items.end(), [&](const Item& i) { return i.param.numel() == target; });
  return it == items.end() ? nullptr : &*it;
}

template <class Item, class Hyper, auto Slot>
void injected_update(const ops::Context& ctx, std::span<const Item> items, const Hyper& hyper) {
  const auto& self = static_cast<const InjectingBackend&>(*ctx.backend);
  const Item* item = target_item(items, self.target);
  if (item != nullptr && self.grad_scale != 1) ops::cpu_backend().scale_inplace(ctx, item->grad, self.grad_scale);
  (ops::cpu_backend().*Slot)(ctx, items, hyper);
  if (item != nullptr && self.step_error != 0) item->param.template data<float>()[0] += self.step_error * hyper.lr;
}

inline InjectingBackend injecting(std::int64_t target, float grad_scale, float step_error) {
  InjectingBackend b;
  static_cast<ops::Backend&>(b) = ops::cpu_backend();
  b.name = "cpu (injecting)";
  b.target = target;
  b.grad_scale = grad_scale;
  b.step_error = step_error;
  b.adamw_update_many = &injected_update<ops::AdamWItem, ops::AdamWHyper, &ops::Backend::adamw_update_many>;
  b.sgd_update_many = &injected_update<ops::SgdItem, ops::SgdHyper, &ops::Backend::sgd_update_many>;
  return b;
}

struct Trained {
  train::ParameterMap initial, params;
  std::vector<double> losses;
  train::ParameterMap sensitivity;  // AdamW's S_i (sensitivity only; verify_adamw_bound.hpp)
};

inline Trained train_one_rank(const config::RunConfig& config, const ops::Backend* backend = nullptr,
                              bool sensitivity = false) {
  auto world = make_world(true);
  train::Trainer trainer(config, *world, backend);
  Trained t;
  t.initial = trainer.gather_parameters();
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    t.losses.push_back(trainer.step(s).loss);
    if (sensitivity) {
      train::add_adamw_sensitivity(t.sensitivity, trainer.local_optimizer_state("exp_avg_sq"), config.optimizer,
                                   config.train.steps, s);
    }
  }
  t.params = trainer.gather_parameters();
  return t;
}

}  // namespace cleave::testing
