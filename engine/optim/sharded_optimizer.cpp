// ZeRO-1 optimizers over flat-buffer shards (sharded_optimizer.hpp): segment bookkeeping, shard-sized
// state, and the same AdamW / SGD kernels as the per-parameter optimizers.
#include "engine/optim/sharded_optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/optim/grad_clip.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::optim {
namespace {

void check_shard(const FlatShard& shard, std::size_t index) {
  // A ZeRO-2 shard's grad is undefined until its bucket's first reduction (set_shard_grads adopts it then).
  CLEAVE_ASSERT(shard.value.defined(), "sharded optimizer: shard {} has no value", index);
  const Tensor& grad = shard.grad.defined() ? shard.grad : shard.value;
  CLEAVE_ASSERT(shard.value.numel() == grad.numel(), "sharded optimizer: shard {} value {} and grad {} elements",
                index, shard.value.numel(), grad.numel());
  CLEAVE_CHECK(shard.value.dtype() == DType::kF32 && grad.dtype() == DType::kF32 &&
                   shard.value.device() == grad.device(),
               "sharded optimizer: shard {} is {} on {} with {} grad on {}; the sharded optimizer updates f32 "
               "(master) weights with their grads on one device",
               index, dtype_name(shard.value.dtype()), shard.value.device().str(), with_article(dtype_name(grad.dtype())),
               grad.device().str());
  std::int64_t end = 0;
  for (const ShardSegment& s : shard.segments) {
    CLEAVE_ASSERT(s.param != nullptr && s.numel > 0 && s.begin >= end && s.begin + s.numel <= shard.value.numel(),
                  "sharded optimizer: shard {} has a segment [{}, {}) that is empty, overlaps or leaves the shard "
                  "({} elements)",
                  index, s.begin, s.begin + s.numel, shard.value.numel());
    end = s.begin + s.numel;
  }
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<FlatShard> shards) : shards_(std::move(shards)) {
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    check_shard(shards_[i], i);
    CLEAVE_CHECK(shards_[i].value.device() == shards_.front().value.device(),
                 "sharded optimizer: shard {} is on {}, shard 0 on {}: one optimizer updates one device", i,
                 shards_[i].value.device().str(), shards_.front().value.device().str());
  }
  if (!shards_.empty()) ctx_.device = shards_.front().value.device();
}

void ShardedOptimizer::run_on(const ops::Context& run) {
  CLEAVE_CHECK(shards_.empty() || run.device == ctx_.device, "sharded optimizer: shards on {}, but the run is on {}",
               ctx_.device.str(), run.device.str());
  Allocator* state_allocator = ctx_.allocator;
  ctx_ = run;
  if (!state_.empty()) ctx_.allocator = state_allocator;
}

void ShardedOptimizer::add_state(const std::string& name, Allocator& allocator) {
  state_names_.push_back(name);
  ctx_.device = allocator.device();
  ctx_.allocator = &allocator;
  auto& tensors = state_.emplace_back();
  tensors.reserve(shards_.size());
  for (const FlatShard& shard : shards_) {
    tensors.push_back(Tensor::zeros({shard.value.numel()}, DType::kF32, MemoryCategory::kOptimizerState, allocator));
  }
}

void ShardedOptimizer::set_shard_grads(const std::vector<Tensor>& grads) {
  CLEAVE_ASSERT(grads.size() == shards_.size(), "sharded optimizer: {} shard grads for {} shards", grads.size(),
                shards_.size());
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    CLEAVE_ASSERT(!grads[s].defined() || (grads[s].dtype() == DType::kF32 &&
                                           grads[s].numel() == shards_[s].value.numel() &&
                                           grads[s].device() == shards_[s].value.device()),
                  "sharded optimizer: shard {} grad does not match its {}-element f32 value", s,
                  shards_[s].value.numel());
    shards_[s].grad = grads[s];
  }
}

void ShardedOptimizer::step(double lr) {
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    CLEAVE_ASSERT(shards_[s].grad.defined(), "sharded optimizer: step() with shard {}'s gradient released", s);
  }
  ++steps_;
  update(static_cast<float>(lr), steps_);
}

std::int64_t ShardedOptimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& tensors : state_) {
    for (const auto& t : tensors) bytes += static_cast<std::int64_t>(t.nbytes());
  }
  return bytes;
}

ShardedAdamW::ShardedAdamW(std::vector<FlatShard> shards, const AdamWOptions& options, Allocator& allocator)
    : ShardedOptimizer(std::move(shards)), options_(options) {
  add_state("exp_avg", allocator);
  add_state("exp_avg_sq", allocator);
}

void ShardedAdamW::update(float lr, std::int64_t step) {
  items_.clear();
  for_each_segment(options_.weight_decay, [&](std::size_t s, std::int64_t begin, std::int64_t end, float wd) {
    items_.push_back({shards_[s].value.slice(begin, end), shards_[s].grad.slice(begin, end),
                      state_[0][s].slice(begin, end), state_[1][s].slice(begin, end), wd});
  });
  ops::adamw_update_many(ctx_, items_,
                         {lr, static_cast<float>(options_.beta1), static_cast<float>(options_.beta2),
                          static_cast<float>(options_.eps), 0.0f, step});
  items_.clear();  // holds no tensor between steps (a ZeRO-2 grad is released after the update)
}

ShardedSgd::ShardedSgd(std::vector<FlatShard> shards, const SgdOptions& options, Allocator& allocator)
    : ShardedOptimizer(std::move(shards)), options_(options) {
  check_sgd_options(options);
  if (options_.momentum > 0.0) add_state("momentum_buffer", allocator);
}

void ShardedSgd::update(float lr, std::int64_t step) {
  items_.clear();
  for_each_segment(options_.weight_decay, [&](std::size_t s, std::int64_t begin, std::int64_t end, float wd) {
    items_.push_back({shards_[s].value.slice(begin, end), shards_[s].grad.slice(begin, end),
                      state_.empty() ? Tensor() : state_[0][s].slice(begin, end), wd});
  });
  ops::sgd_update_many(ctx_, items_, {lr, static_cast<float>(options_.momentum), 0.0f, options_.nesterov, step == 1});
  items_.clear();
}

std::unique_ptr<ShardedOptimizer> make_sharded_optimizer(const config::OptimizerConfig& config,
                                                         std::vector<FlatShard> shards, Allocator& allocator) {
  switch (config.type) {
    case config::OptimizerType::kAdamw:
      return std::make_unique<ShardedAdamW>(
        std::move(shards), AdamWOptions{config.betas[0], config.betas[1], config.eps, config.weight_decay}, allocator);
    case config::OptimizerType::kSgd:
      return std::make_unique<ShardedSgd>(std::move(shards),
                                        SgdOptions{config.momentum, config.weight_decay, config.nesterov}, allocator);
  }
  CLEAVE_ASSERT(false, "unknown OptimizerType {}", static_cast<int>(config.type));
  return nullptr;
}

kernels::ExactSquareSum shard_grad_sum_of_squares(const std::vector<FlatShard>& shards, const ParamFilter& counted,
                                                  const ops::Context& ctx) {
  std::vector<Tensor> list;
  return shard_grad_sum_of_squares(shards, counted, ctx, list);
}

kernels::ExactSquareSum shard_grad_sum_of_squares(const std::vector<FlatShard>& shards, const ParamFilter& counted,
                                                  const ops::Context& ctx, std::vector<Tensor>& list) {
  list.clear();  // one wait for all (ops::sum_squares_exact; the order does not matter)
  for (const FlatShard& shard : shards) {
    CLEAVE_CHECK(shard.grad.dtype() == DType::kF32, "grad norm: a shard holds {} gradients; expected f32",
                 dtype_name(shard.grad.dtype()));
    for (const ShardSegment& s : shard.segments) {
      if (counted && !counted(*s.param)) continue;
      list.push_back(shard.grad.slice(s.begin, s.begin + s.numel));
    }
  }
  const kernels::ExactSquareSum sum = ops::sum_squares_exact(ctx, list);
  list.clear();  // holds no gradient between steps
  return sum;
}

double clip_shard_grads(const std::vector<FlatShard>& shards, double max_norm, double norm, const ops::Context& ctx) {
  std::vector<Tensor> list;
  return clip_shard_grads(shards, max_norm, norm, ctx, list);
}

double clip_shard_grads(const std::vector<FlatShard>& shards, double max_norm, double norm, const ops::Context& ctx,
                        std::vector<Tensor>& list) {
  if (max_norm <= 0.0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  const float factor = static_cast<float>(scale);
  list.clear();  // one call for all (one OpenMP team on the CPU)
  for (const FlatShard& shard : shards) {
    for (const ShardSegment& s : shard.segments) list.push_back(shard.grad.slice(s.begin, s.begin + s.numel));
  }
  ops::scale_inplace_many(ctx, list, factor);
  list.clear();
  return scale;
}

}  // namespace cleave::optim
