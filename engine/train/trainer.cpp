// Trainer: one process's share of a run (trainer.hpp). This file holds its public calls over the parts
// (trainer_impl.hpp): one step through the executor and the numbers it returns, evaluation, parameters, the
// measured timeline, generation, checkpoints and weights. The run loop, train(), is train_loop.cpp.
#include "engine/train/trainer.hpp"

#include <filesystem>
#include <utility>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "engine/train/checkpoint/weights_only.hpp"
#include "engine/train/evaluation.hpp"
#include "engine/train/generation.hpp"
#include "engine/train/measured_trace.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/parameter_gather.hpp"
#include "engine/train/trainer_impl.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

Trainer::Trainer(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend)
    : impl_(std::make_unique<Impl>(std::move(config), world, backend)) {}

Trainer::Trainer(config::RunConfig config, run_plan::Plan plan, comm::Communicator& world)
    : impl_(std::make_unique<Impl>(std::move(config), world, nullptr, std::move(plan))) {}

Trainer::~Trainer() = default;

const config::RunConfig& Trainer::config() const { return impl_->setup.config; }

const run_plan::Plan& Trainer::plan() const { return impl_->setup.plan; }

MemoryStats Trainer::memory_stats() const { return impl_->setup.allocator->stats(); }

ops::HostWaits Trainer::host_waits() const { return impl_->setup.host_waits; }

void Trainer::reset_peak_memory() { impl_->setup.allocator->reset_peak(); }

std::string Trainer::checkpoint_root() const {
  return checkpoint_root_of(impl_->setup.config);
}

CheckpointSaveStats Trainer::save_checkpoint(const std::string& root, std::int64_t steps_done) {
  if (impl_->pending_save) impl_->commit_pending_save();
  return train::save_checkpoint(impl_->setup, impl_->model, impl_->tail, root, steps_done);
}

std::int64_t Trainer::load_checkpoint(const std::string& step_dir, bool continue_run) {
  return train::load_checkpoint(impl_->setup, impl_->model, impl_->tail, step_dir, continue_run);
}

void Trainer::load_weights(const WeightSource& source) {
  FullParameters whole(impl_->tail.parameter_shards());
  const std::size_t tensors = train::load_weights(impl_->setup, impl_->model, source);
  impl_->setup.source = source.source;
  impl_->init_from = fmt::format("{}: {}", source.origin, describe_context(source, impl_->setup.config));
  if (impl_->setup.reports()) {
    for (const std::string& note : source.notes) log::warn("init: {}", note);
    log::info("init: parameters from {} ({} tensors on rank 0); the optimizer state starts fresh at step 0",
              source.origin, tensors);
    log::info("init: {}", describe_context(source, impl_->setup.config));
  }
}

EvalResult Trainer::evaluate(std::int64_t batches) {
  CLEAVE_ASSERT(impl_->eval_executor != nullptr, "evaluate() without an evaluation data source (train.eval_batches 0)");
  EvalResult result = evaluate_batches(impl_->setup, *impl_->eval_executor, batches);
  impl_->staged_batches.clear();  // each pass ended in check_device_status, which waited for the stream
  return result;
}

std::map<std::string, std::vector<float>> Trainer::gather_parameters() {
  FullParameters whole(impl_->tail.parameter_shards());
  return train::gather_parameters(impl_->setup, impl_->model);
}

std::map<std::string, std::vector<float>> Trainer::local_optimizer_state(const std::string& kind) const {
  const optim::Optimizer* optimizer = impl_->tail.optimizer();
  CLEAVE_CHECK(impl_->setup.world.size() == 1 && optimizer != nullptr && impl_->setup.context.device.is_cpu(),
               "local_optimizer_state() needs a run of one rank on the cpu without ZeRO (world {})",
               impl_->setup.world.size());
  std::map<std::string, std::vector<float>> out;
  const std::string suffix = "." + kind;
  for (const auto& [name, tensor] : optimizer->state()) {
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    out[name.substr(0, name.size() - suffix.size())] = tensor.to_floats();
  }
  return out;
}

pipeline::Timeline Trainer::measured_timeline() {
  CLEAVE_CHECK(impl_->setup.config.train.trace, "measured_timeline() needs train.trace = true");
  return gather_timeline(impl_->setup, impl_->last_timeline);
}

std::vector<float> Trainer::next_token_logits(const std::vector<std::int32_t>& tokens) {
  return train::next_token_logits(impl_->setup, impl_->model, tokens);
}

StepStats Trainer::step(std::int64_t step) {
  Impl& s = *impl_;
  const auto start = TrainerClock::now();
  s.current_step = step;
  s.setup.context.step = step;  // model.forced_routing's workloads (layers/layer.hpp)
  s.tail.begin(step);
  s.router_metrics.begin_step();
  // Forward, backward, reduction, optimizer; the outcome is the executor's (reused from step to step).
  pipeline::StepOutcome& outcome = s.executor->run_step(step);
  ops::check_device_status(s.setup.context);  // bad token ids / targets a GPU kernel recorded (CPU: no-op)
  s.staged_batches.clear();  // check_device_status waited for the stream: the uploads have finished
  // Swapped, not moved: the executor refills the previous step's list in place next step (no allocation).
  if (s.setup.config.train.trace) std::swap(s.last_timeline, outcome.timeline);
  const StepTailResult tail = s.tail.finish();

  const double loss = s.global_mean_loss(outcome);
  const StepEnd end = s.agree_on_step_end();
  StepStats stats;
  stats.step = step;
  stats.loss = loss;
  stats.lr = tail.lr;
  stats.grad_norm = tail.grad_norm;
  stats.step_ms = elapsed_ms(start);
  const double items = static_cast<double>(s.setup.batch.global_batch_size * s.setup.plan.spec.items_per_sample());
  stats.tokens_per_s = items / (stats.step_ms * 1e-3);
  stats.flops_per_rank = s.throughput.flops_per_rank(stats.step_ms);
  stats.mfu = s.throughput.mfu(stats.step_ms);
  stats.skipped = tail.skipped;
  stats.peak_bytes = end.peak_bytes;
  stats.p2p_bytes = outcome.p2p_bytes_sent;
  stats.overlapped_pairs = outcome.overlapped_pairs;
  stats.pair_hand_overs = outcome.pair_hand_overs;
  stats.dp_grad_bytes = tail.dp_bytes;
  stats.routing = s.router_metrics.finish(s.setup.world, s.setup.coords.tp_rank, s.setup.context, s.setup.grid.ep_size(),
                                         s.setup.coords.ep_rank, s.setup.context.ep_comm);
  stats.stop_requested = end.stop_requested;
  return stats;
}

}  // namespace cleave::train
