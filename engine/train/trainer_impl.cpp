// Trainer::Impl's wiring: the constructor, the executors' options, micro-batches on the run's device, the step's
// global mean loss, checkpoints saved from the loop. See trainer_impl.hpp.
#include "engine/train/trainer_impl.hpp"

#include <algorithm>
#include <array>
#include <functional>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/collectives.hpp"
#include "engine/train/data/cp_shard.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/stop_request.hpp"
#include "kernels/ops/ops.hpp"
#include "pipeline/forward_only.hpp"

namespace cleave::train {
namespace {

// A batch the data source wrote into host memory, on the run's device: uploaded on the run's stream (from
// pinned memory on a GPU; the host tensors go to `staged`, kept until the step's end has waited for the
// stream). On the CPU the batch is used where it is.
Batch on_run_device(const RankSetup& s, Batch host, std::vector<Tensor>& staged) {
  if (!s.on_device()) return host;
  Batch device;
  for (auto [from, to] : {std::pair{&host.inputs, &device.inputs}, std::pair{&host.targets, &device.targets}}) {
    *to = Tensor::empty(from->shape(), from->dtype(), MemoryCategory::kActivations, *s.allocator);
    ops::transfer(s.context, *from, *to);
    staged.push_back(*from);
  }
  return device;
}

// Floating model inputs (mlp / cnn features) in the compute dtype; token ids pass unchanged.
Tensor in_compute_dtype(const RankSetup& s, const Tensor& inputs) {
  if (inputs.dtype() != DType::kF32 || s.context.compute_dtype() == DType::kF32) return inputs;
  Tensor out = Tensor::empty(inputs.shape(), s.context.compute_dtype(), MemoryCategory::kActivations, *s.allocator);
  ops::copy(s.context, inputs, out);
  return out;
}

// CLEAVE_FAULT_INJECT (a test hook of the failure drills), checked against the layout.
std::optional<FaultPlan> checked_fault_plan(const RankSetup& s) {
  std::optional<FaultPlan> fault = fault_plan_from_env();
  if (fault && fault->point == FaultPoint::kDpReduce) {
    CLEAVE_CHECK(s.grid.dp_size() > 1, "CLEAVE_FAULT_INJECT: dp_reduce needs data parallelism (dp is 1 in {})",
                 s.grid.str());
  }
  return fault;
}

// dy of each micro-batch's mean loss: 1 / (micro-batches of the global batch), the same factor on one rank
// and on every replica, so the summed gradient is the global mean without a division after the reduction.
// Under context parallelism each cp rank's loss is the mean over its T / cp tokens, so the cp ranks' mean is
// the sequence's mean: the factor divides by cp too, and the gradients are summed over dp × cp.
float microbatch_loss_scale(const RankSetup& s) {
  return 1.0f / static_cast<float>(s.batch.gradient_accumulation_steps * static_cast<std::int64_t>(s.grid.dp_size()) *
                                   static_cast<std::int64_t>(s.grid.cp_size()));
}

}  // namespace

double Trainer::Impl::commit_pending_save() {
  const auto start = TrainerClock::now();
  std::unique_ptr<CheckpointSave> save = std::move(pending_save);
  save->commit(setup);
  return elapsed_ms(start);
}

StepEnd Trainer::Impl::agree_on_step_end() {
  const bool writing = pending_save && pending_save->writing();
  std::array<double, 3> peaks = {static_cast<double>(setup.allocator->stats().peak_total), writing ? 1.0 : 0.0,
                                 stop_requested() ? 1.0 : 0.0};
  reduce_doubles_into(setup.world, peaks, peaks, comm::ReduceOp::kMax);  // in place: nothing allocated
  if (pending_save && peaks[1] == 0.0) {
    const std::int64_t saved = pending_save->steps_done();
    committed_in_step = {saved, commit_pending_save()};
  }
  return StepEnd{static_cast<std::int64_t>(peaks[0]), peaks[2] != 0.0};
}

void Trainer::Impl::save_in_train_loop(const std::string& root, std::int64_t steps_done) {
  const auto start = TrainerClock::now();
  const std::int64_t previous = pending_save ? pending_save->steps_done() : -1;
  const double waited_ms = pending_save ? commit_pending_save() : 0.0;
  std::optional<FaultPlan> fire;
  if (fault && fault->due(setup.world.rank(), steps_done, FaultPoint::kSave)) {
    fire = *fault;
    fault->fired = true;  // the copy fires, in the writer
  }
  const bool background = setup.config.checkpoint.background;
  auto save = std::make_unique<CheckpointSave>(setup, model, tail, root, steps_done, background, fire);
  if (background) pending_save = std::move(save);
  else save->commit(setup);
  const double pause = reduce_doubles(setup.world, {elapsed_ms(start)}, comm::ReduceOp::kMax)[0];
  if (setup.reports()) {
    const std::string waited =
        previous < 0 ? std::string() : fmt::format(", {:.1f} ms of it committing step {}", waited_ms, previous);
    log::info("checkpoint: step {}: the step loop paused {:.1f} ms{}{}", steps_done, pause, waited,
              background ? "; its files are written in the background" : "");
  }
}

Trainer::Impl::Impl(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend,
                    std::optional<run_plan::Plan> planned)
    : setup(std::move(config), world, backend, std::move(planned)),
      model(setup),
      fault(checked_fault_plan(setup)),
      tail(setup, model, !fault || fault->point != FaultPoint::kDpReduce ? std::function<void(int)>()
                                                                          : [this](int bucket) {
        if (fault->due(setup.world.rank(), current_step + 1, FaultPoint::kDpReduce)) {
          fault->fire(fmt::format("after posting data-parallel gradient bucket {}", bucket));
        }
      }) {
  const config::RunConfig& cfg = setup.config;
  if (router_metrics.active()) setup.context.router_log = &router_metrics.log();
  throughput = make_throughput(setup.plan.spec, setup.batch.global_batch_size, setup.world.size(), {});
  train_data = make_data_source(cfg, Split::kTrain);
  if (cfg.train.eval_batches > 0) eval_data = make_data_source(cfg, Split::kEval);
  layout.global_batch_size = setup.batch.global_batch_size;
  layout.micro_batch_size = setup.batch.micro_batch_size;
  layout.dp_rank = setup.coords.dp_rank;
  layout.dp_size = setup.grid.dp_size();
  layout.check();
  executor = std::make_unique<pipeline::Executor>(training_options());
  // Evaluation: a forward-only schedule with the same placement, through the same interpreter.
  if (eval_data) {
    eval_schedule = pipeline::forward_only_schedule(setup.plan.schedule);
    eval_executor = std::make_unique<pipeline::Executor>(evaluation_options());
  }
}

pipeline::MicrobatchData Trainer::Impl::load_microbatch(DataSource& source, std::int64_t batch, int microbatch) {
  Batch b = on_run_device(setup,
                          cp_shard(source.next_batch(batch, microbatch, layout, setup.host_allocator()),
                                   setup.context.cp, setup.host_allocator()),
                          staged_batches);
  return pipeline::MicrobatchData{in_compute_dtype(setup, b.inputs), b.targets};
}

pipeline::ExecutorOptions Trainer::Impl::placement_options() {
  pipeline::ExecutorOptions options;
  options.schedule = &setup.plan.schedule;
  options.pp_rank = setup.coords.pp_rank;
  options.pp_comm = setup.grid.pp_size() > 1 ? setup.groups.pp.get() : nullptr;
  options.stages = model.stage_by_index();
  const std::int64_t micro = setup.batch.micro_batch_size;
  options.boundary_shape = [&plan = setup.plan, micro](int stage) { return plan.boundary_shape(stage, micro); };
  options.loss_scale = microbatch_loss_scale(setup);
  options.context = &setup.context;
  return options;
}

pipeline::ExecutorOptions Trainer::Impl::training_options() {
  pipeline::ExecutorOptions options = placement_options();
  options.data = [this](std::int64_t step, int microbatch) { return load_microbatch(*train_data, step, microbatch); };
  options.record_timeline = setup.config.train.trace;
  // The step's tail runs inside the schedule: REDUCE_GRAD after a stage's last weight gradient, then
  // OPTIMIZER_STEP closing the rank's list (pipeline/lowering.hpp).
  options.reduce_grads = [this](int stage) { tail.reduce_grads(stage); };
  options.optimizer_step = [this] { tail.optimizer_step(); };
  if (fault && fault->point == FaultPoint::kForward) {
    const int victim_microbatch = std::min(1, setup.plan.schedule.num_microbatches - 1);
    options.before_compute = [this, victim_microbatch](const pipeline::Action& a) {
      if (a.kind == pipeline::ActionKind::kForward && a.microbatch == victim_microbatch &&
          fault->due(setup.world.rank(), current_step + 1, FaultPoint::kForward)) {
        fault->fire(fmt::format("stage {} forward of micro-batch {}", a.stage, a.microbatch));
      }
    };
  }
  return options;
}

pipeline::ExecutorOptions Trainer::Impl::evaluation_options() {
  pipeline::ExecutorOptions options = placement_options();
  options.mode = pipeline::ExecutorMode::kEvaluate;
  options.schedule = &eval_schedule;
  options.data = [this](std::int64_t batch, int microbatch) { return load_microbatch(*eval_data, batch, microbatch); };
  return options;
}

// Each micro-batch's loss is placed at its global index (replica-major, as the data is sharded) and summed in
// that order on every rank, so one rank and any data-parallel layout report the same double. The last stage's
// tp rank 0 of each replica fills its slots and every other slot is zero; x + 0 is exact, so the all_reduce
// moves values without rounding.
double Trainer::Impl::global_mean_loss(const pipeline::StepOutcome& outcome) {
  const std::int64_t per_replica = setup.batch.gradient_accumulation_steps;
  Tensor& all = microbatch_losses;
  if (!all.defined()) {
    // A host control tensor (the losses arrive on the host, read back once by the executor).
    all = Tensor::empty({per_replica * setup.grid.dp_size() * setup.grid.cp_size()}, DType::kF32,
                        MemoryCategory::kCommunication,
                        setup.host_allocator());
  }
  all.fill_(0.0f);
  if (setup.counts_loss()) {
    CLEAVE_ASSERT(static_cast<std::int64_t>(outcome.losses.size()) == per_replica,
                  "the last stage computed {} micro-batch losses, expected {}", outcome.losses.size(), per_replica);
    for (const auto& [microbatch, loss] : outcome.losses) {
      // Under cp, each cp rank's mean over its tokens (equal counts): their mean is the sequence's.
      const std::int64_t replica = setup.coords.dp_rank * setup.grid.cp_size() + setup.coords.cp_rank;
      all.data<float>()[replica * per_replica + microbatch] = loss;
    }
  }
  setup.world.all_reduce(all, comm::ReduceOp::kSum)->wait();
  double sum = 0;
  for (float loss : all.span<float>()) sum += static_cast<double>(loss);
  return sum / static_cast<double>(all.numel());
}

}  // namespace cleave::train
