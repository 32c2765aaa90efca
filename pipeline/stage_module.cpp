// StageModule: runs its blocks in order forward and in reverse for the two halves of the backward. A micro-batch's
// stash set is a map node recycled from a closed one (open_stashes), so its stashes keep their memory across steps.
#include "pipeline/stage_module.hpp"

#include <algorithm>

#include "layers/comm_wait.hpp"

namespace cleave::pipeline {

class StageModule::Resident {
 public:
  // ZeRO-3's gathers (and the wait for a prefetched one) are timed as the zero_gather wait (layers/comm_wait.hpp).
  Resident(ParameterResidency* residency, std::size_t block, std::ptrdiff_t next, const layers::Context& ctx)
      : residency_(residency), block_(static_cast<int>(block)), ctx_(ctx) {
    if (residency_ == nullptr) return;
    const layers::CommWaitTimer timer(ctx_, layers::CommKind::kZeroGather);
    residency_->acquire(block_, static_cast<int>(next));
  }
  ~Resident() {
    if (residency_ == nullptr) return;
    const layers::CommWaitTimer timer(ctx_, layers::CommKind::kZeroGather);
    residency_->release(block_);
  }
  Resident(const Resident&) = delete;
  Resident& operator=(const Resident&) = delete;

 private:
  ParameterResidency* residency_;
  int block_;
  const layers::Context& ctx_;
};

StageModule::StageModule(std::vector<layers::LayerPtr> blocks, bool is_first, bool is_last)
    : blocks_(std::move(blocks)), is_first_(is_first), is_last_(is_last) {
  CLEAVE_ASSERT(!blocks_.empty(), "a stage needs at least one block");
  for (const auto& block : blocks_) {
    std::vector<layers::Param*>& listed = block_params_.emplace_back();
    for (auto& p : block->params()) {
      listed.push_back(p.get());
      if (std::find(params_.begin(), params_.end(), p) == params_.end()) params_.push_back(p);
    }
  }
  // The backward visits blocks in reverse: a parameter shared by several blocks (a tied table) has received
  // all of a micro-batch's contributions after its lowest block.
  finishes_.resize(blocks_.size());
  for (const auto& p : params_) {
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const auto held = blocks_[i]->params();
      if (std::find(held.begin(), held.end(), p) != held.end()) {
        finishes_[i].push_back(p.get());
        break;
      }
    }
  }
  lowest_ = finishes_;
}

int StageModule::lowest_block_of(const layers::Param& p) const {
  for (std::size_t i = 0; i < lowest_.size(); ++i) {
    for (const layers::Param* q : lowest_[i]) {
      if (q == &p) return static_cast<int>(i);
    }
  }
  return -1;
}

void StageModule::enable_ordered_accumulation(int microbatches, const std::vector<const layers::Param*>& in_place,
                                              const ops::Context& ctx) {
  auto skipped = [&in_place](const layers::Param* p) {
    return std::find(in_place.begin(), in_place.end(), p) != in_place.end();
  };
  std::vector<std::shared_ptr<layers::Param>> ordered;
  for (const auto& p : params_) {
    if (!skipped(p.get())) ordered.push_back(p);
  }
  for (auto& block_params : finishes_) std::erase_if(block_params, skipped);
  ordered_ = std::make_unique<OrderedGradAccumulator>(std::move(ordered), microbatches, ctx);
}

std::vector<layers::Stash>& StageModule::open_stashes(int microbatch) {
  CLEAVE_ASSERT(!stashes_.contains(microbatch), "forward of micro-batch {} while its previous stash is still alive",
                microbatch);
  StashSets::iterator it;
  if (spare_.empty()) {
    it = stashes_.try_emplace(microbatch).first;
  } else {
    StashSets::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = microbatch;
    it = stashes_.insert(std::move(node)).position;
  }
  it->second.resize(blocks_.size());
  return it->second;
}

void StageModule::close_stashes(StashSets::iterator it) {
  for (layers::Stash& stash : it->second) stash.clear();  // what a block's backward_weight left, if anything
  spare_.push_back(stashes_.extract(it));
}

Tensor StageModule::forward(int microbatch, const Tensor& x, const Tensor& targets, layers::Context& ctx) {
  std::vector<layers::Stash>& stashes = open_stashes(microbatch);
  Tensor h = x;
  const std::size_t n = blocks_.size();
  for (std::size_t i = 0; i < n; ++i) {
    Resident resident(residency_, i, i + 1 < n ? static_cast<std::ptrdiff_t>(i + 1) : -1, ctx);
    h = layers::forward_block(*blocks_[i], h, targets, stashes[i], ctx);
  }
  return h;
}

Tensor StageModule::infer(const Tensor& x, layers::Context& ctx) {
  const std::size_t end = is_last_ ? blocks_.size() - 1 : blocks_.size();
  Tensor h = x;
  for (std::size_t i = 0; i < end; ++i) {
    Resident resident(residency_, i, i + 1 < end ? static_cast<std::ptrdiff_t>(i + 1) : -1, ctx);
    layers::Stash scratch;
    scratch.backward_follows = false;  // nothing only a backward reads is made (the moe count exchange)
    h = blocks_[i]->forward(h, scratch, ctx);
  }
  return h;
}

layers::EvalCounts StageModule::evaluate(const Tensor& x, const Tensor& targets, layers::Context& ctx) {
  CLEAVE_ASSERT(is_last_, "evaluate() on a stage that is not the last");
  auto* loss = dynamic_cast<layers::LossLayer*>(blocks_.back().get());
  CLEAVE_ASSERT(loss != nullptr, "the last block ({}) is not a loss layer", blocks_.back()->kind());
  const Tensor logits = infer(x, ctx);
  Resident resident(residency_, blocks_.size() - 1, -1, ctx);
  return loss->evaluate(logits, targets, ctx);
}

Tensor StageModule::backward_input(int microbatch, const Tensor& dy, layers::Context& ctx) {
  auto it = stashes_.find(microbatch);
  CLEAVE_ASSERT(it != stashes_.end(), "backward of micro-batch {} before its forward", microbatch);
  Tensor g = dy;
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    Resident resident(residency_, i, static_cast<std::ptrdiff_t>(i) - 1, ctx);
    g = blocks_[i]->backward_input(g, it->second[i], ctx);
  }
  // The first stage consumes data (token ids or features): nothing upstream needs its input gradient.
  return is_first_ ? Tensor() : g;
}

void StageModule::begin_weight_pass(int microbatch, bool final) {
  if (!ordered_) return;
  CLEAVE_ASSERT(final == (microbatch == ordered_->microbatches() - 1),
                "ordered accumulation: micro-batch {} of {} called with final = {}", microbatch,
                ordered_->microbatches(), final);
  ordered_->begin_microbatch(microbatch);
}

void StageModule::block_weight(std::size_t i, layers::Stash& stash, layers::Context& ctx, bool final) {
  if (on_grad_begin_) {
    for (layers::Param* p : block_params_[i]) on_grad_begin_(*p);
  }
  blocks_[i]->backward_weight(stash, ctx);
  if (ordered_) {
    for (layers::Param* p : finishes_[i]) ordered_->param_done(*p);
  }
  if (final && partial_grad_sum_ && !lowest_[i].empty()) partial_grad_sum_(lowest_[i]);
  if (final && on_grad_final_) {
    for (layers::Param* p : block_params_[i]) on_grad_final_(*p);
  }
  if (on_grad_done_) {
    for (layers::Param* p : block_params_[i]) on_grad_done_(*p);
  }
}

void StageModule::backward_weight(int microbatch, layers::Context& ctx, bool final) {
  auto it = stashes_.find(microbatch);
  CLEAVE_ASSERT(it != stashes_.end(), "weight gradient of micro-batch {} before its forward", microbatch);
  begin_weight_pass(microbatch, final);
  for (std::size_t i = blocks_.size(); i-- > 0;) block_weight(i, it->second[i], ctx, final);
  close_stashes(it);
}

Tensor StageModule::backward(int microbatch, const Tensor& dy, layers::Context& ctx, bool final) {
  auto it = stashes_.find(microbatch);
  CLEAVE_ASSERT(it != stashes_.end(), "backward of micro-batch {} before its forward", microbatch);
  begin_weight_pass(microbatch, final);
  Tensor g = dy;
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    {
      Resident resident(residency_, i, static_cast<std::ptrdiff_t>(i) - 1, ctx);
      g = blocks_[i]->backward_input(g, it->second[i], ctx);
    }
    block_weight(i, it->second[i], ctx, final);  // reads stashes and gradients only
  }
  close_stashes(it);
  return is_first_ ? Tensor() : g;
}

}  // namespace cleave::pipeline
