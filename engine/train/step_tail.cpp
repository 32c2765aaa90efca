// StepTail: reduction, norm, clipping, update (see step_tail.hpp).
#include "engine/train/step_tail.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optimizer_factory.hpp"
#include "engine/train/collectives.hpp"
#include "layers/layer_util.hpp"

namespace cleave::train {
namespace {

// The norm of the sum of every rank's exact sums of squares over `comm`: the wire form in a fixed array, reduced in
// place (nothing allocated).
double summed_norm(comm::Communicator& comm, const kernels::ExactSquareSum& local) {
  kernels::ExactSquareSum::Wire wire = local.wire();
  reduce_doubles_into(comm, wire, wire, comm::ReduceOp::kSum);
  return std::sqrt(kernels::ExactSquareSum::from_wire(wire).to_double());
}

}  // namespace

StepTail::StepTail(RankSetup& setup, RankModel& model, std::function<void(int bucket)> after_bucket_launch)
    : setup_(setup), model_(model), unique_params_(optim::unique_params(model.params())) {
  const config::RunConfig& cfg = setup.config;
  // Data parallel: grads (and, under ZeRO-1, values) become views into flat bucket buffers before any
  // optimizer sees them; the tied table's copies are summed inside the reduction, before dp.
  const int replicas = setup.grid.dp_size() * setup.grid.cp_size();  // dp × cp ranks hold the same parameters
  if (replicas > 1) {
    DataParallelOptions options;
    options.bucket_mib = cfg.parallel.dp_bucket_mb;
    options.grad_wire_dtype = cfg.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16 ? DType::kBF16 : DType::kF32;
    options.zero_stage = cfg.optimizer.zero_stage;
    options.per_microbatch = config::resolved_zero_reduce(cfg) == config::ZeroReduce::kPerMicrobatch;
    options.optimizer = cfg.optimizer;
    options.context = setup.context;
    options.average = false;  // the loss scale divides by dp × cp
    options.after_bucket_launch = std::move(after_bucket_launch);
    if (setup.grid.ep_size() > 1) options.expert_replicas = setup.groups.expert_replicas();
    data_parallel_ = std::make_unique<DataParallel>(setup.plan, setup.coords.pp_rank, model.stage_by_index(),
                                                    model.params(), *setup.groups.replicas(), model.tied_group(), options);
  }
  // Deterministic mode: micro-batch gradients summed in the canonical order, so that n micro-batches on one
  // rank and the same n spread over dp replicas add the same floats in the same order (sum_tree.hpp). After
  // DataParallel: the accumulator's "home" is each gradient's final storage (a bucket view).
  if (cfg.train.deterministic) {
    model.enable_ordered_accumulation(static_cast<int>(setup.batch.gradient_accumulation_steps), setup.context);
  }
  if (!data_parallel_ || !data_parallel_->sharded()) {
    optimizer_ = optim::make_optimizer(cfg.optimizer, model.params(), *setup.allocator);
    optimizer_->run_on(setup.context);  // the run's stream (B1)
  }
  lr_schedule_ = optim::LrSchedule::from_config(cfg.optimizer, cfg.train.steps);
  // Under ZeRO-1 the values are views by now; under ZeRO-3 there are none (the store made its working shards).
  if (parameter_shards() == nullptr) layers::refresh_working_copies(model.params(), setup.context);
}

ParameterShards* StepTail::parameter_shards() {
  return data_parallel_ ? data_parallel_->parameter_shards() : nullptr;
}

StepTail::~StepTail() = default;

void StepTail::begin(std::int64_t step) {
  step_ = step;
  stages_reduced_ = 0;
  reduced_ = false;
  result_ = {};
  if (data_parallel_) data_parallel_->begin_step();
  else optimizer_->zero_grad();
}

void StepTail::reduce_grads(int) {
  if (++stages_reduced_ == static_cast<int>(model_.stages().size())) finish_gradient_reduction();
}

// Data parallel finishes its buckets (the tied table's copies summed first; every replica then holds the mean
// gradient, or under ZeRO-1 its shard of it); without dp the tied table's two copies are summed.
void StepTail::finish_gradient_reduction() {
  if (data_parallel_) result_.dp_bytes = data_parallel_->end_step().wire_bytes;
  else if (model_.tied_table()) {
    model_.tied_group()->all_reduce(model_.tied_table()->grad, comm::ReduceOp::kSum, *setup_.context.stream)->wait();
  }
  reduced_ = true;
}

void StepTail::optimizer_step() {
  if (!reduced_) finish_gradient_reduction();  // a schedule without REDUCE_GRAD (pp = 1 lists none)
  const int tp_rank = setup_.coords.tp_rank;
  const optim::ParamFilter counted = [this, tp_rank](const layers::Param& p) {
    return model_.counts_in_norm(p, tp_rank);
  };
  // With dp > 1 each rank counts its dp shard of every gradient and the sum runs over the whole world. The sums
  // are exact (kernels/exact_square_sum.hpp), so the norm's bits do not depend on how dp, ZeRO or ep split the
  // gradients, nor on the reduction order.
  result_.grad_norm = data_parallel_ ? summed_norm(setup_.world, data_parallel_->local_grad_sum_of_squares(counted))
                                     : global_norm_without_dp(counted);
  result_.lr = lr_schedule_.lr_at(step_);
  // A NaN or an infinity anywhere would reach every weight through the update (and a checkpoint after it): the
  // step is skipped instead. The norm is the same reduced value on every rank, so they all skip.
  if (!std::isfinite(result_.grad_norm)) {
    result_.skipped = true;
    return;
  }
  const double max_norm = setup_.config.optimizer.grad_clip;
  if (max_norm > 0) {
    if (data_parallel_) data_parallel_->clip(max_norm, result_.grad_norm);
    else optim::clip_unique_grads(unique_params_, max_norm, result_.grad_norm, setup_.context, grad_list_);
  }
  if (optimizer_) optimizer_->step(result_.lr);
  else data_parallel_->sharded_step(result_.lr);  // ZeRO-3 refreshes its working shards itself
  if (parameter_shards() == nullptr) layers::refresh_working_copies(model_.params(), setup_.context);
}

double StepTail::global_norm_without_dp(const optim::ParamFilter& counted) {
  const kernels::ExactSquareSum local =
      optim::unique_grad_sum_of_squares(unique_params_, counted, setup_.context, grad_list_);
  return summed_norm(*setup_.model_parallel, local);
}

std::int64_t StepTail::optimizer_steps_done() const {
  return optimizer_ ? optimizer_->steps_done() : data_parallel_->sharded_optimizer()->steps_done();
}

void StepTail::set_optimizer_steps_done(std::int64_t steps) {
  if (optimizer_) optimizer_->set_steps_done(steps);
  else data_parallel_->sharded_optimizer()->set_steps_done(steps);
}

}  // namespace cleave::train
