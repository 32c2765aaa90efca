// Optimizer bookkeeping (parameter checks, state allocation) and the AdamW / SGD updates (all parameters in one
// multi-tensor call).
#include "engine/optim/optimizer.hpp"

#include <unordered_set>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::optim {

ParamList unique_params(const ParamList& params) {
  ParamList out;
  std::unordered_set<const layers::Param*> seen;
  for (const auto& p : params) {
    CLEAVE_ASSERT(p != nullptr, "null Param in a parameter list");
    if (seen.insert(p.get()).second) out.push_back(p);
  }
  return out;
}

Optimizer::Optimizer(const ParamList& params) : params_(unique_params(params)) {
  for (const auto& p : params_) {
    CLEAVE_ASSERT(p->value.defined() && p->grad.defined(), "parameter {} has no value or no grad", p->name);
    CLEAVE_ASSERT(p->value.shape() == p->grad.shape(), "parameter {}: value {} and grad {} differ in shape", p->name,
                  p->value.shape().str(), p->grad.shape().str());
    CLEAVE_CHECK(p->value.dtype() == DType::kF32 && p->grad.dtype() == DType::kF32,
                 "optimizer: parameter {} is {} with {} grad; the optimizer updates f32 (master) weights", p->name,
                 dtype_name(p->value.dtype()), dtype_name(p->grad.dtype()));
    CLEAVE_CHECK(p->value.device() == params_.front()->value.device() && p->grad.device() == p->value.device(),
                 "optimizer: parameter {} is on {} with its grad on {}, parameter {} on {}: one optimizer updates "
                 "tensors on one device", p->name, p->value.device().str(), p->grad.device().str(),
                 params_.front()->name, params_.front()->value.device().str());
  }
  if (!params_.empty()) ctx_.device = params_.front()->value.device();
}

void Optimizer::run_on(const ops::Context& run) {
  CLEAVE_CHECK(params_.empty() || run.device == ctx_.device, "optimizer: parameters on {}, but the run is on {}",
               ctx_.device.str(), run.device.str());
  Allocator* state_allocator = ctx_.allocator;
  static_cast<ops::Context&>(ctx_) = run;
  if (!state_.empty()) ctx_.allocator = state_allocator;
}

void Optimizer::add_state(const std::string& name, Allocator& allocator) {
  ctx_.device = allocator.device();
  ctx_.allocator = &allocator;
  state_names_.push_back(name);
  auto& tensors = state_.emplace_back();
  tensors.reserve(params_.size());
  for (const auto& p : params_) {
    tensors.push_back(Tensor::zeros(p->value.shape(), DType::kF32, MemoryCategory::kOptimizerState, allocator));
  }
}

void Optimizer::step(double lr) {
  ++steps_;
  if (!params_.empty()) update(static_cast<float>(lr), steps_);
}

void Optimizer::zero_grad() {
  for (const auto& p : params_) p->grad.zero_();
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& tensors : state_) {
    for (const auto& t : tensors) bytes += static_cast<std::int64_t>(t.nbytes());
  }
  return bytes;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (std::size_t k = 0; k < state_.size(); ++k) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      out.emplace_back(params_[i]->name + "." + state_names_[k], state_[k][i]);
    }
  }
  return out;
}

AdamW::AdamW(const ParamList& params, const AdamWOptions& options, Allocator& allocator)
    : Optimizer(params), options_(options) {
  add_state("exp_avg", allocator);
  add_state("exp_avg_sq", allocator);
}

void AdamW::update(float lr, std::int64_t step) {
  items_.clear();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const layers::Param& p = *params_[i];
    const float wd = p.weight_decay ? static_cast<float>(options_.weight_decay) : 0.0f;
    items_.push_back({p.value, p.grad, state_[0][i], state_[1][i], wd});
  }
  ops::adamw_update_many(ctx_, items_,
                         {lr, static_cast<float>(options_.beta1), static_cast<float>(options_.beta2),
                          static_cast<float>(options_.eps), 0.0f, step});
  items_.clear();  // holds no tensor between steps
}

void check_sgd_options(const SgdOptions& options) {
  CLEAVE_CHECK(options.momentum >= 0.0 && options.momentum < 1.0, "sgd: momentum must be in [0, 1), got {}",
               options.momentum);
  CLEAVE_CHECK(!options.nesterov || options.momentum > 0.0, "sgd: nesterov needs momentum > 0, got {}",
               options.momentum);
}

Sgd::Sgd(const ParamList& params, const SgdOptions& options, Allocator& allocator)
    : Optimizer(params), options_(options) {
  check_sgd_options(options);
  if (options_.momentum > 0.0) add_state("momentum_buffer", allocator);
}

void Sgd::update(float lr, std::int64_t step) {
  items_.clear();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const layers::Param& p = *params_[i];
    const float wd = p.weight_decay ? static_cast<float>(options_.weight_decay) : 0.0f;
    items_.push_back({p.value, p.grad, state_.empty() ? Tensor() : state_[0][i], wd});
  }
  ops::sgd_update_many(ctx_, items_, {lr, static_cast<float>(options_.momentum), 0.0f, options_.nesterov, step == 1});
  items_.clear();
}

}  // namespace cleave::optim
