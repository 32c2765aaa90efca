// StageModule: a contiguous range of model blocks (one pipeline stage, or the whole model) with one set of
// stashes per in-flight micro-batch.
//
// Invariants: forward(mb) must precede backward_input(mb), which must precede backward_weight(mb); the
// micro-batch's stashes are released by backward_weight, so the number of live stashes (and the
// activation memory the allocator shows) is exactly what the schedule keeps in flight. The last stage's
// output is the 1-element mean loss of the micro-batch; its backward takes the loss scale as dy.
// In deterministic mode (enable_ordered_accumulation) the micro-batches' weight gradients are summed in the
// canonical order of engine/core/sum_tree.hpp, so the total does not depend on how many micro-batches of the
// global batch this replica holds. Under ZeRO-3 a ParameterResidency (parameter_residency.hpp) makes each block's
// parameters resident around its forward and its input-gradient pass only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "layers/layer.hpp"
#include "pipeline/ordered_grad_accumulator.hpp"
#include "pipeline/parameter_residency.hpp"

namespace cleave::pipeline {

class StageModule {
 public:
  StageModule(std::vector<layers::LayerPtr> blocks, bool is_first, bool is_last);

  // x: the stage input (token ids / features on the first stage, the boundary activation otherwise);
  // targets: the loss block's targets on the last stage (ignored, and may be undefined, on the others).
  Tensor forward(int microbatch, const Tensor& x, const Tensor& targets, layers::Context& ctx);
  // dy: boundary gradient (or, on the last stage, a 1-element tensor holding the loss scale).
  // Returns the gradient for the previous stage (undefined on the first stage).
  Tensor backward_input(int microbatch, const Tensor& dy, layers::Context& ctx);
  // `final`: this is the stage's last weight-gradient pass of the step; each block's parameters are then
  // reported to the grad-final callback as soon as the block is done (in reverse block order), so
  // data-parallel reduction can start while earlier blocks are still computing.
  void backward_weight(int microbatch, layers::Context& ctx, bool final = false);
  // Deterministic mode: `microbatches` weight-gradient passes per step, combined in the canonical order
  // (ordered_grad_accumulator.hpp). The gradients must have their final storage already (data-parallel
  // buckets adopt them before this is called); passes must come in micro-batch order. Parameters listed in
  // `in_place` keep accumulating in place: a tied table shared with another stage on this rank (ZB-V), whose
  // two stages' passes interleave across micro-batches.
  // `ctx`: the run's op context (the partial sums' allocator and device).
  void enable_ordered_accumulation(int microbatches, const std::vector<const layers::Param*>& in_place = {},
                                   const ops::Context& ctx = {});
  void set_grad_final_callback(std::function<void(const layers::Param&)> callback) {
    on_grad_final_ = std::move(callback);
  }
  // Per-micro-batch gradient reduction (ZeRO-2/3 with optimizer.zero_reduce per_microbatch): `before` gets each
  // of block i's parameters right before every weight-gradient pass of the block writes into their gradients
  // (so their storage can be allocated only then), `after` gets them once the block's pass is done, in every
  // pass, final or not (a tied table shared by several blocks is reported once per block). Either may be empty.
  void set_grad_pass_callbacks(std::function<void(const layers::Param&)> before,
                               std::function<void(const layers::Param&)> after) {
    on_grad_begin_ = std::move(before);
    on_grad_done_ = std::move(after);
  }
  // Sequence parallelism: replicated parameters get partial gradients on each tp rank
  // (layers/parallel/tp_util.hpp). In the step's last weight-gradient pass, once a block is done (and its
  // ordered accumulation, if any), `sum` gets the parameters whose lowest block it is (each parameter once per
  // step) before the grad-final callback sees any of them, so data parallelism reduces the summed gradient.
  void set_partial_grad_sum(std::function<void(const std::vector<layers::Param*>&)> sum) {
    partial_grad_sum_ = std::move(sum);
  }
  // The fused backward (B): each block's input gradient then at once its weight gradient, in reverse block
  // order, so only one block at a time holds what its weight gradient needs (its weights' inputs and output
  // gradients; a recomputed block's rebuilt stash) instead of every block of the stage at the end of a
  // separate input-gradient pass. Per-parameter accumulation order is that of backward_input +
  // backward_weight (W visits blocks in reverse in both), so the results are bit-identical.
  Tensor backward(int microbatch, const Tensor& dy, layers::Context& ctx, bool final = false);

  // Forward without keeping anything for a backward (evaluation). On the last stage it stops before the
  // loss block and returns the logits.
  Tensor infer(const Tensor& x, layers::Context& ctx);
  // Last stage only: the loss block's evaluation counts of x against `targets`, keeping nothing.
  layers::EvalCounts evaluate(const Tensor& x, const Tensor& targets, layers::Context& ctx);

  const std::vector<std::shared_ptr<layers::Param>>& params() const { return params_; }
  std::size_t num_blocks() const { return blocks_.size(); }
  // Block i's parameters (a tied head lists the embedding's table too).
  std::vector<std::shared_ptr<layers::Param>> block_params(std::size_t i) const { return blocks_.at(i)->params(); }
  // Index of the first block that holds p (where its gradient is complete in a backward), -1 if none does.
  int lowest_block_of(const layers::Param& p) const;
  // ZeRO-3: block parameters are gathered around each block's forward and input-gradient pass
  // (parameter_residency.hpp); null (the default) when every block holds its parameters. Must outlive the
  // stage's use or be reset.
  void set_parameter_residency(ParameterResidency* residency) { residency_ = residency; }
  ParameterResidency* parameter_residency() const { return residency_; }

 private:
  // Block i's parameters resident for the scope (no-op without a residency); `next` is prefetched.
  class Resident;
  void begin_weight_pass(int microbatch, bool final);
  // Block i's weight gradient, then what finishes with it (ordered accumulation, the grad-final callback).
  void block_weight(std::size_t i, layers::Stash& stash, layers::Context& ctx, bool final);

  std::vector<layers::LayerPtr> blocks_;
  std::vector<std::shared_ptr<layers::Param>> params_;  // de-duplicated (tied tables appear once)
  bool is_first_;
  bool is_last_;
  using StashSets = std::map<int, std::vector<layers::Stash>>;
  // A new micro-batch's stash set: a node (its stashes' memory with it) released by an earlier one when there is
  // one, so a steady-state step opens and closes micro-batches without operator new.
  std::vector<layers::Stash>& open_stashes(int microbatch);
  void close_stashes(StashSets::iterator it);

  StashSets stashes_;                          // micro-batch -> one stash per block
  std::vector<StashSets::node_type> spare_;    // closed sets, emptied, for open_stashes
  std::function<void(const layers::Param&)> on_grad_final_;
  std::function<void(const layers::Param&)> on_grad_begin_;
  std::function<void(const layers::Param&)> on_grad_done_;
  std::function<void(const std::vector<layers::Param*>&)> partial_grad_sum_;
  // Block -> its parameters (blocks_[i]->params(), listed once at construction: the grad callbacks walk it per
  // micro-batch without making a list).
  std::vector<std::vector<layers::Param*>> block_params_;
  std::vector<std::vector<layers::Param*>> finishes_;  // block -> params whose lowest block it is
  std::vector<std::vector<layers::Param*>> lowest_;    // the same, never filtered (partial_grad_sum_)
  std::unique_ptr<OrderedGradAccumulator> ordered_;
  ParameterResidency* residency_ = nullptr;
};

}  // namespace cleave::pipeline
