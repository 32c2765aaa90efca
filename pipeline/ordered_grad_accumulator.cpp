// OrderedGradAccumulator: the streaming canonical sum of engine/core/sum_tree.hpp applied to gradients.
#include "pipeline/ordered_grad_accumulator.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "engine/core/sum_tree.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::pipeline {
OrderedGradAccumulator::OrderedGradAccumulator(std::vector<std::shared_ptr<layers::Param>> params,
                                               int microbatches, const ops::Context& ctx)
    : params_(std::move(params)), microbatches_(microbatches), ctx_(ctx) {
  CLEAVE_ASSERT(microbatches_ >= 1, "ordered accumulation over {} micro-batches", microbatches_);
  for (const auto& p : params_) {
    CLEAVE_ASSERT(p->grad.dtype() == DType::kF32 && p->grad.device() == ctx_.device,
                  "ordered accumulation supports f32 gradients on {} ({} is {} on {})", ctx_.device.str(), p->name,
                  dtype_name(p->grad.dtype()), p->grad.device().str());
    entries_[p.get()].lanes = std::max(1, p->ep_size);
  }
}

void OrderedGradAccumulator::begin_microbatch(int microbatch) {
  const bool new_step = microbatch == 0 && (current_ == -1 || current_ == microbatches_ - 1);
  CLEAVE_ASSERT(new_step || (microbatch == current_ + 1 && microbatch < microbatches_),
                "ordered accumulation expects micro-batches in order: got {} after {} (of {})", microbatch,
                current_, microbatches_);
  if (current_ != -1) {
    for (const auto& p : params_) {
      CLEAVE_ASSERT(entries_.at(p.get()).done_this_microbatch,
                    "{}: micro-batch {} began before micro-batch {} reported it", p->name, microbatch, current_);
    }
  }
  current_ = microbatch;
  for (const auto& p : params_) {
    Entry& e = entries_.at(p.get());
    e.done_this_microbatch = false;
    if (e.lanes > 1) {  // every micro-batch writes a lane buffer; home only receives the final sum
      if (microbatch == 0) {
        e.home = p->grad;
        e.lane_stacks.assign(static_cast<std::size_t>(e.lanes), {});
      }
      p->grad = Tensor::empty(e.home.shape().with_dim(0, e.home.dim(0) * e.lanes), DType::kF32,
                              MemoryCategory::kGradients, *ctx_.allocator);
      ops::fill(ctx_, p->grad, 0.0f);
    } else if (microbatch == 0) {
      e.home = p->grad;  // the caller's tensor (a view into a data-parallel bucket, or the param's own)
      e.stack.clear();
    } else {
      p->grad = Tensor::empty(e.home.shape(), DType::kF32, MemoryCategory::kGradients, *ctx_.allocator);
      ops::fill(ctx_, p->grad, 0.0f);
    }
  }
}

void OrderedGradAccumulator::param_done(layers::Param& param) {
  auto it = entries_.find(&param);
  CLEAVE_ASSERT(it != entries_.end(), "{} is not a parameter of this stage", param.name);
  Entry& e = it->second;
  CLEAVE_ASSERT(!e.done_this_microbatch, "{} reported twice in micro-batch {}", param.name, current_);
  e.done_this_microbatch = true;
  if (e.lanes > 1) {
    lane_done(param, e);
    return;
  }

  // Push this micro-batch's gradient; equal-sized partial sums merge, the earlier one on the left.
  Partial leaf{param.grad, 0};
  while (!e.stack.empty() && e.stack.back().log2_size == leaf.log2_size) {
    Partial left = std::move(e.stack.back());
    e.stack.pop_back();
    ops::add_inplace(ctx_, left.sum, leaf.sum);  // the earlier micro-batches stay on the left
    leaf = Partial{std::move(left.sum), leaf.log2_size + 1};
  }
  e.stack.push_back(std::move(leaf));

  if (current_ == microbatches_ - 1) {
    // Fold from the right: s[0] + (s[1] + (... + s[k])). s[0] is home (micro-batch 0 started there and
    // every merge keeps the left operand), so the total lands in home.
    for (std::size_t d = e.stack.size() - 1; d-- > 0;) ops::add_inplace(ctx_, e.stack[d].sum, e.stack[d + 1].sum);
    CLEAVE_ASSERT(e.stack.front().sum.raw_data() == e.home.raw_data(), "{}: the canonical sum left home",
                  param.name);
    e.stack.clear();
    param.grad = e.home;
    e.home = Tensor();  // not a second owner between steps: ZeRO-2 releases the bucket the grad views
  }
}

namespace {

// Canonical tree over t[lo, hi) (sum_tree.hpp), the result left in t[lo].
void fold_tree(const ops::Context& ctx, std::vector<Tensor>& t, std::size_t lo, std::size_t hi) {
  if (hi - lo <= 1) return;
  const std::size_t left = static_cast<std::size_t>(sum_tree_left(static_cast<std::int64_t>(hi - lo)));
  fold_tree(ctx, t, lo, lo + left);
  fold_tree(ctx, t, lo + left, hi);
  ops::add_inplace(ctx, t[lo], t[lo + left]);
}

}  // namespace

void OrderedGradAccumulator::lane_done(layers::Param& param, Entry& e) {
  const std::int64_t rows = e.home.dim(0);
  for (int l = 0; l < e.lanes; ++l) {
    std::vector<Partial>& stack = e.lane_stacks[static_cast<std::size_t>(l)];
    Partial leaf{param.grad.slice(l * rows, (l + 1) * rows), 0};
    while (!stack.empty() && stack.back().log2_size == leaf.log2_size) {
      Partial left = std::move(stack.back());
      stack.pop_back();
      ops::add_inplace(ctx_, left.sum, leaf.sum);
      leaf = Partial{std::move(left.sum), leaf.log2_size + 1};
    }
    stack.push_back(std::move(leaf));
  }
  if (current_ != microbatches_ - 1) return;
  std::vector<Tensor> totals;
  for (auto& stack : e.lane_stacks) {
    for (std::size_t d = stack.size() - 1; d-- > 0;) ops::add_inplace(ctx_, stack[d].sum, stack[d + 1].sum);
    totals.push_back(stack.front().sum);
  }
  fold_tree(ctx_, totals, 0, totals.size());
  ops::copy(ctx_, totals.front(), e.home);
  e.lane_stacks.clear();
  param.grad = e.home;
  e.home = Tensor();
}

}  // namespace cleave::pipeline
