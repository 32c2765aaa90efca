// StepTail: what closes a training step, after the last weight gradient: the gradient reduction over
// data-parallel replicas and the tied table's two copies, the true global gradient norm, clipping, the
// optimizer update (plain, or ZeRO-1's sharded one) and the refresh of bf16 working copies. The executor runs
// it inside the schedule (its REDUCE_GRAD and OPTIMIZER_STEP hooks, pipeline/lowering.hpp); the step's
// numbers come back from finish(), not through shared scratch fields.
//
// Invariants: the norm counts every logical gradient element once (tp-replicated parameters on tp rank 0,
// a split tied table on the embedding's rank; with dp each rank its shard, summed over the world); the
// update sees gradients that are the global-batch mean (the loss scale divides by every micro-batch of every
// replica, so no division follows the reduction); the LR is the schedule's value at the step begin() named; a
// step whose global norm is not finite (NaN or an infinity in any gradient) changes no weight and no optimizer
// state: every rank sees the same reduced norm, so every rank skips together (the trainer decides whether the run
// goes on, train.skip_nonfinite_steps).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/optim/lr_schedule.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/train/data_parallel.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {

// What one step's tail did.
struct StepTailResult {
  double grad_norm = 0;         // before clipping
  double lr = 0;                // the learning rate the update used (or would have used, when skipped)
  std::int64_t dp_bytes = 0;    // bytes this rank's data-parallel gradient collectives carried (0 without dp)
  bool skipped = false;         // the norm was not finite: no update was applied (the weights are unchanged)
};

class StepTail {
 public:
  // Builds data parallelism when dp > 1 (every grad, and under ZeRO-1 every value, becomes a view into the
  // bucket buffers before any optimizer sees it), ordered accumulation in deterministic mode, the optimizer
  // and the LR schedule, then refreshes the working copies. `after_bucket_launch` is the failure drills' hook
  // (may be empty). `setup` and `model` must outlive the tail.
  StepTail(RankSetup& setup, RankModel& model, std::function<void(int bucket)> after_bucket_launch = {});
  ~StepTail();
  StepTail(const StepTail&) = delete;
  StepTail& operator=(const StepTail&) = delete;

  // Before the step's first micro-batch: zeroes the gradients; `step` (0-based) picks the LR.
  void begin(std::int64_t step);
  // REDUCE_GRAD of `stage`: once every local stage has reported, finishes the gradient reduction.
  void reduce_grads(int stage);
  // OPTIMIZER_STEP: the global norm, clipping, the update, the working-copy refresh; with a non-finite norm only
  // the norm (the step is skipped). Collective over the replica's model-parallel ranks (and the world under dp).
  void optimizer_step();
  // After the step: its numbers.
  StepTailResult finish() const { return result_; }

  // Checkpoints: the optimizer's update count and state, and the LR schedule.
  std::int64_t optimizer_steps_done() const;
  void set_optimizer_steps_done(std::int64_t steps);
  const optim::Optimizer* optimizer() const { return optimizer_.get(); }  // null under ZeRO-1
  const DataParallel* data_parallel() const { return data_parallel_.get(); }  // null without dp
  DataParallel* data_parallel() { return data_parallel_.get(); }
  // ZeRO-3's parameter store (null otherwise): FullParameters over it before reading or writing whole values.
  ParameterShards* parameter_shards();
  double lr_at(std::int64_t step) const { return lr_schedule_.lr_at(step); }

 private:
  void finish_gradient_reduction();
  // Without dp: the exact sum over this rank's gradients, summed over the model-parallel ranks (tp and pp hold
  // different parameters): optim::global_grad_norm's value, with this tail's lists.
  double global_norm_without_dp(const optim::ParamFilter& counted);

  RankSetup& setup_;
  RankModel& model_;
  std::unique_ptr<DataParallel> data_parallel_;  // dp > 1: bucketed, overlapped reduction; ZeRO-1
  std::unique_ptr<optim::Optimizer> optimizer_;  // null under ZeRO-1 (data_parallel_ holds the sharded one)
  optim::LrSchedule lr_schedule_;
  std::int64_t step_ = 0;
  int stages_reduced_ = 0;
  bool reduced_ = false;
  StepTailResult result_;
  optim::ParamList unique_params_;  // model_.params(), each once (without dp: the norm and clipping walk it)
  std::vector<Tensor> grad_list_;   // their tensor list, kept between steps (empty)
};

}  // namespace cleave::train
