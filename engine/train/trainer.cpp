// Trainer: the training loop over one rank's parts: RankSetup (grid,
// memory, op context, plan), RankModel (stages and parameters), StepTail (reduction, clipping, update) and
// the executors that run the schedule. The order of everything inside a step is the schedule's
// (pipeline/executor.cpp), its tail included: the executor's REDUCE_GRAD and OPTIMIZER_STEP hooks call the
// StepTail. This file wires the parts and keeps the loop: resume, metrics, evaluation and checkpoint cadence,
// the report.
#include "engine/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/report/html_report.hpp"
#include "engine/train/checkpoint_io.hpp"
#include "engine/train/checkpoint_pieces.hpp"
#include "engine/train/router_metrics.hpp"
#include "engine/train/checkpoint_reader.hpp"
#include "engine/train/collectives.hpp"
#include "engine/train/config_change.hpp"
#include "engine/train/data/cp_shard.hpp"
#include "engine/train/data/data_source.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/evaluation.hpp"
#include "engine/train/fault_injection.hpp"
#include "engine/train/generation.hpp"
#include "engine/train/measured_trace.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/parameter_gather.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/run_record.hpp"
#include "engine/train/step_tail.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/train/weights_only.hpp"
#include "kernels/ops/ops.hpp"
#include "pipeline/executor.hpp"
#include "pipeline/forward_only.hpp"

namespace cleave::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// report.html from the run directory's files (engine/report/html_report.hpp). A page that cannot be written is
// a warning: the run's outcome does not depend on it, and `cleave report DIR` makes it later from the same files.
void write_report_page(const std::string& out_dir, std::string_view note) {
  try {
    log::info("report {}{}", report::write_report(out_dir), note);
  } catch (const std::exception& e) {
    log::warn("{} (retry with cleave report {})", e.what(), out_dir);
  }
}

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

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

// A resumed run's config against the one its checkpoint was trained with (index.json "config"; a checkpoint
// written before that field existed is compared with the run directory's config.json, when there is one).
// Refused on every rank when a key changed that needs --allow-config-change (config_change.hpp).
std::vector<ConfigChange> check_resumed_config(RankSetup& s, const std::string& step_dir,
                                               const std::vector<std::string>& allowed) {
  std::vector<ConfigChange> changes;
  std::string error;
  try {
    const auto read_json = [](const std::filesystem::path& path) {
      std::ifstream in(path);
      CLEAVE_CHECK(in.good(), "--resume: cannot read {}", path.string());
      return nlohmann::json::parse(in);
    };
    const nlohmann::json index = read_json(std::filesystem::path(step_dir) / "index.json");
    const std::filesystem::path run_config = std::filesystem::path(s.config.train.out_dir) / "config.json";
    std::optional<nlohmann::json> before;
    if (index.contains("config")) before = index.at("config");
    else if (std::filesystem::exists(run_config)) before = read_json(run_config);
    const nlohmann::json after = nlohmann::json::parse(config::to_json(s.config));
    if (before) changes = config_changes(*before, after);
    check_config_changes(changes, allowed, after, step_dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_if_any_rank_failed(s.world, error);
  if (s.reports()) {
    for (const ConfigChange& c : changes) {
      log::info("resume: config changed since the checkpoint: {}{}", c.describe(),
                c.free ? "" : " (allowed by --allow-config-change)");
    }
  }
  return changes;
}

// config.json of a resumed run is replaced only when it says something new, and then the old one is kept as
// config.before_step_<k>.json (never overwritten: a second copy gets a numbered name).
void keep_previous_config(const std::string& out_dir, const std::string& new_text, std::int64_t step) {
  namespace fs = std::filesystem;
  const fs::path current = fs::path(out_dir) / "config.json";
  if (!fs::exists(current)) return;
  std::ifstream in(current);
  const std::string old_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (old_text == new_text) return;
  fs::path kept = fs::path(out_dir) / fmt::format("config.before_step_{}.json", step);
  for (int n = 2; fs::exists(kept); ++n) kept = fs::path(out_dir) / fmt::format("config.before_step_{}.{}.json", step, n);
  fs::rename(current, kept);
  log::info("resume: the previous config.json is kept as {}", kept.string());
}

// run.json of a resumed run: the resumes recorded earlier in the directory (before this one's step) and this one.
// A fresh run's record is returned as it is.
report::RunSummary with_resume(report::RunSummary record, const std::string& out_dir, bool resumed,
                               std::int64_t step, const std::string& step_dir,
                               const std::vector<ConfigChange>& changes) {
  if (!resumed) return record;
  const std::filesystem::path path = std::filesystem::path(out_dir) / "run.json";
  if (std::filesystem::exists(path)) {
    try {
      std::ifstream in(path);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (auto& r : report::parse_run_summary(text, path.string()).resumes) {
        if (r.at_step < step) record.resumes.push_back(std::move(r));
      }
    } catch (const Error& e) {
      log::warn("run.json: the earlier file does not parse ({}); its resume history is not carried over", e.what());
    }
  }
  report::ResumeRecord now{step, step_dir, {}};
  for (const ConfigChange& c : changes) {
    now.config_changes.push_back({c.key, c.before.is_null() ? "absent" : c.before.dump(),
                                  c.after.is_null() ? "absent" : c.after.dump(),
                                  c.free ? "resume" : "--allow-config-change"});
  }
  record.resumes.push_back(std::move(now));
  return record;
}

// TrainOptions::restart_record, read on world rank 0 (the only rank that writes metrics); number 0 = none.
struct RestartRecord {
  std::int64_t number = 0;
  double launched_unix_s = 0;
};
RestartRecord read_restart_record(const std::string& path, bool reads) {
  RestartRecord r;
  if (path.empty() || !reads) return r;
  try {
    std::ifstream in(path);
    CLEAVE_CHECK(in.good(), "cannot read it");
    const nlohmann::json j = nlohmann::json::parse(in);
    r.number = j.at("restart").get<std::int64_t>();
    r.launched_unix_s = j.at("launched_unix_s").get<double>();
  } catch (const std::exception& e) {
    log::warn("restart record {}: {}; the restart's timings are not recorded", path, e.what());
    r = {};
  }
  return r;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Trainer::Impl {
  Impl(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend);

  // The step's loss: the mean over the global batch's micro-batches (see the definition).
  double global_mean_loss(const pipeline::StepOutcome& outcome);

  RankSetup setup;
  RankModel model;
  std::optional<FaultPlan> fault;  // usually empty
  std::int64_t current_step = 0;   // the step running (0-based): fault hooks read it
  StepTail tail;
  RouterMetrics router_metrics{setup.plan.spec};  // mixture-of-experts models' routing fields
  Throughput throughput;           // model FLOPs per step; the peak comes with train()'s options
  std::unique_ptr<DataSource> train_data;
  std::unique_ptr<DataSource> eval_data;
  BatchLayout layout;
  std::unique_ptr<pipeline::Executor> executor;       // the training step
  pipeline::Schedule eval_schedule;                   // forward-only (pipeline/forward_only.hpp)
  std::unique_ptr<pipeline::Executor> eval_executor;  // evaluation through the same interpreter
  std::vector<pipeline::TimedAction> last_timeline;
  Tensor microbatch_losses;  // [dp * micro-batches] f32 (host): the step's loss of every global micro-batch
  std::vector<Tensor> staged_batches;  // host halves of this step's uploads (on_run_device), freed at its end
  // A checkpoint being written in the background (checkpoint.background), committed by the first step that finds
  // every rank's writer done, the next save or the end of the run. Last member: its writer is joined first.
  std::unique_ptr<CheckpointSave> pending_save;
  std::optional<std::pair<std::int64_t, double>> committed_in_step;  // (step saved, ms), for train()'s log
  std::string init_from;  // run.json "init_from": the --init-from source and the context length taken

  // Commits pending_save (waiting for the writers); collective. Returns how long that took.
  double commit_pending_save();
  // checkpoint.background: the snapshot, the writer started; else the whole save. Collective.
  void save_in_train_loop(const std::string& root, std::int64_t steps_done);
};

double Trainer::Impl::commit_pending_save() {
  const auto start = Clock::now();
  std::unique_ptr<CheckpointSave> save = std::move(pending_save);
  save->commit(setup);
  return elapsed_ms(start);
}

void Trainer::Impl::save_in_train_loop(const std::string& root, std::int64_t steps_done) {
  const auto start = Clock::now();
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

Trainer::Impl::Impl(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend)
    : setup(std::move(config), world, backend),
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

  pipeline::ExecutorOptions options;
  options.schedule = &setup.plan.schedule;
  options.pp_rank = setup.coords.pp_rank;
  options.pp_comm = setup.grid.pp_size() > 1 ? setup.groups.pp.get() : nullptr;
  options.stages = model.stage_by_index();
  const std::int64_t micro = setup.batch.micro_batch_size;
  options.boundary_shape = [&plan = setup.plan, micro](int stage) { return plan.boundary_shape(stage, micro); };
  options.data = [this](std::int64_t step, int microbatch) {
    Batch b = on_run_device(setup,
                            cp_shard(train_data->next_batch(step, microbatch, layout, setup.host_allocator()),
                                     setup.context.cp, setup.host_allocator()),
                            staged_batches);
    return pipeline::MicrobatchData{in_compute_dtype(setup, b.inputs), b.targets};
  };
  // dy of each micro-batch's mean loss: 1 / (micro-batches of the global batch), the same factor on one rank
  // and on every replica, so the summed gradient is the global mean without a division after the reduction.
  // Under context parallelism each cp rank's loss is the mean over its T / cp tokens, so the cp ranks' mean is
  // the sequence's mean: the factor divides by cp too, and the gradients are summed over dp × cp.
  options.loss_scale = 1.0f / static_cast<float>(setup.batch.gradient_accumulation_steps *
                                                 static_cast<std::int64_t>(setup.grid.dp_size()) *
                                                 static_cast<std::int64_t>(setup.grid.cp_size()));
  options.context = &setup.context;
  options.record_timeline = cfg.train.trace;
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
  pipeline::ExecutorOptions eval_options = options;
  executor = std::make_unique<pipeline::Executor>(std::move(options));

  // Evaluation: a forward-only schedule with the same placement, through the same interpreter.
  if (eval_data) {
    eval_schedule = pipeline::forward_only_schedule(setup.plan.schedule);
    eval_options.mode = pipeline::ExecutorMode::kEvaluate;
    eval_options.schedule = &eval_schedule;
    eval_options.record_timeline = false;
    eval_options.reduce_grads = {};
    eval_options.optimizer_step = {};
    eval_options.before_compute = {};
    eval_options.data = [this](std::int64_t batch, int microbatch) {
      Batch b = on_run_device(setup,
                              cp_shard(eval_data->next_batch(batch, microbatch, layout, setup.host_allocator()),
                                       setup.context.cp, setup.host_allocator()),
                              staged_batches);
      return pipeline::MicrobatchData{in_compute_dtype(setup, b.inputs), b.targets};
    };
    eval_executor = std::make_unique<pipeline::Executor>(std::move(eval_options));
  }
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

Trainer::Trainer(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend)
    : impl_(std::make_unique<Impl>(std::move(config), world, backend)) {}

Trainer::~Trainer() = default;

const config::RunConfig& Trainer::config() const { return impl_->setup.config; }

const run_plan::Plan& Trainer::plan() const { return impl_->setup.plan; }

MemoryStats Trainer::memory_stats() const { return impl_->setup.allocator->stats(); }

ops::HostWaits Trainer::host_waits() const { return impl_->setup.host_waits; }

void Trainer::reset_peak_memory() { impl_->setup.allocator->reset_peak(); }

std::string Trainer::checkpoint_root() const {
  const auto& cfg = impl_->setup.config;
  return cfg.checkpoint.dir.empty() ? (fs::path(cfg.train.out_dir) / "checkpoints").string() : cfg.checkpoint.dir;
}

CheckpointSaveStats Trainer::save_checkpoint(const std::string& root, std::int64_t steps_done) {
  if (impl_->pending_save) impl_->commit_pending_save();
  return train::save_checkpoint(impl_->setup, impl_->model, impl_->tail, root, steps_done);
}

std::int64_t Trainer::load_checkpoint(const std::string& step_dir, bool continue_run) {
  if (is_weights_only(CheckpointReader(step_dir).index())) {
    CLEAVE_CHECK(!continue_run,
                 "--resume {}: this checkpoint holds weights only (written by cleave import): there is no run to "
                 "continue; start one from it with cleave train CONFIG --init-from {}",
                 step_dir, step_dir);
    const WeightSource source = open_weight_source(step_dir);
    FullParameters whole(impl_->tail.parameter_shards());
    const std::size_t tensors = train::load_weights(impl_->setup, impl_->model, source);
    if (impl_->setup.reports()) log::info("checkpoint: loaded {} (weights only, {} tensors on rank 0)", step_dir, tensors);
    return 0;
  }
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

pipeline::Timeline Trainer::measured_timeline() {
  CLEAVE_CHECK(impl_->setup.config.train.trace, "measured_timeline() needs train.trace = true");
  return gather_timeline(impl_->setup, impl_->last_timeline);
}

std::vector<float> Trainer::next_token_logits(const std::vector<std::int32_t>& tokens) {
  return train::next_token_logits(impl_->setup, impl_->model, tokens);
}

StepStats Trainer::step(std::int64_t step) {
  Impl& s = *impl_;
  const auto start = Clock::now();
  s.current_step = step;
  s.setup.context.step = step;  // model.forced_routing's workloads (layers/layer.hpp)
  s.tail.begin(step);
  s.router_metrics.begin_step();
  pipeline::StepOutcome outcome = s.executor->run_step(step);  // forward, backward, reduction, optimizer
  ops::check_device_status(s.setup.context);  // bad token ids / targets a GPU kernel recorded (CPU: no-op)
  s.staged_batches.clear();  // check_device_status waited for the stream: the uploads have finished
  if (s.setup.config.train.trace) s.last_timeline = std::move(outcome.timeline);
  const StepTailResult tail = s.tail.finish();

  const double loss = s.global_mean_loss(outcome);
  // A background checkpoint's writers ride on this reduction: when none is still writing, it is committed now.
  // So does the save-and-stop request (stop_request.hpp): every rank sees one that reached any rank.
  const bool writing = s.pending_save && s.pending_save->writing();
  const auto peaks = reduce_doubles(s.setup.world,
                                    {static_cast<double>(s.setup.allocator->stats().peak_total), writing ? 1.0 : 0.0,
                                     stop_requested() ? 1.0 : 0.0},
                                    comm::ReduceOp::kMax);
  if (s.pending_save && peaks[1] == 0.0) {
    const std::int64_t saved = s.pending_save->steps_done();
    s.committed_in_step = {saved, s.commit_pending_save()};
  }
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
  stats.peak_bytes = static_cast<std::int64_t>(peaks[0]);
  stats.p2p_bytes = outcome.p2p_bytes_sent;
  stats.overlapped_pairs = outcome.overlapped_pairs;
  stats.pair_hand_overs = outcome.pair_hand_overs;
  stats.dp_grad_bytes = tail.dp_bytes;
  stats.routing = s.router_metrics.finish(s.setup.world, s.setup.coords.tp_rank, s.setup.context, s.setup.grid.ep_size(),
                                         s.setup.coords.ep_rank);
  stats.stop_requested = peaks[2] != 0.0;
  return stats;
}

TrainSummary Trainer::train(const TrainOptions& options) {
  Impl& impl = *impl_;
  RankSetup& s = impl.setup;
  const auto& cfg = s.config;
  const std::string unit(s.plan.spec.throughput_unit());
  const std::string checkpoints = checkpoint_root();
  impl.throughput.peak = options.peak;
  // Every output path before any work: a checkpoint.dir that is a file, or an out_dir under one, is an error
  // now, not after the steps it was meant to keep. Every rank writes checkpoint files; rank 0 the run files.
  {
    std::string error;
    try {
      if (s.reports()) check_output_dir("train.out_dir", cfg.train.out_dir);
      if (cfg.checkpoint.interval > 0 || cfg.checkpoint.save_final) check_output_dir("checkpoint.dir", checkpoints);
    } catch (const std::exception& e) {
      error = e.what();
    }
    throw_if_any_rank_failed(s.world, error);
  }
  CLEAVE_CHECK(options.init == nullptr || options.resume.empty(),
               "train: --init-from starts a fresh run from weights and --resume continues a run; give one of them");
  if (options.init != nullptr) load_weights(*options.init);
  // Resume first: a checkpoint that cannot be loaded fails before anything is written.
  std::int64_t start_step = 0;
  bool resumed = false;
  std::string resumed_from;
  std::vector<ConfigChange> resume_changes;
  const RestartRecord restart = read_restart_record(options.restart_record, s.reports());
  const double load_began_unix_s = unix_seconds();
  const auto load_began = Clock::now();
  if (!options.resume.empty()) {
    std::optional<std::string> dir;
    if (options.resume == "auto") {
      dir = checkpoint::latest_step_dir(checkpoints);
      if (!dir && s.reports()) log::info("checkpoint: --resume auto found no checkpoint under {}; starting fresh", checkpoints);
    } else {
      CLEAVE_CHECK(std::filesystem::is_directory(options.resume), "--resume {}: no such checkpoint directory",
                   options.resume);
      dir = std::filesystem::exists(std::filesystem::path(options.resume) / "index.json")
                ? std::optional<std::string>(options.resume)
                : checkpoint::latest_step_dir(options.resume);
      CLEAVE_CHECK(dir.has_value(), "--resume {}: holds no complete checkpoint (no index.json, no step_NNNNNNN/)",
                   options.resume);
    }
    if (dir) {
      resume_changes = check_resumed_config(s, *dir, options.allow_config_change);
      start_step = load_checkpoint(*dir, /*continue_run=*/true);
      s.source = CheckpointReader(*dir).index().value("source", nlohmann::json());
      resumed_from = *dir;
      resumed = true;
    }
  }
  const double load_s = elapsed_ms(load_began) * 1e-3;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<ProgressPrinter> progress;
  StepCounts counts;  // carried on from the kept rows of a resumed run (rank 0 reads them; all ranks count)
  if (s.reports()) {
    // A resumed run continues in its own directory: metrics rows after the checkpoint's step are dropped.
    if (options.resume.empty()) prepare_out_dir(cfg.train.out_dir);
    else std::filesystem::create_directories(cfg.train.out_dir);
    if (resumed) keep_previous_config(cfg.train.out_dir, config::to_json(cfg) + "\n", start_step);
    write_text_file(cfg.train.out_dir + "/config.json", config::to_json(cfg) + "\n");
    const std::string metrics_path = cfg.train.out_dir + "/metrics.jsonl";
    if (!options.resume.empty()) counts = keep_metrics_through(metrics_path, start_step);
    metrics = std::make_unique<MetricsWriter>(metrics_path, !options.resume.empty());
    progress = std::make_unique<ProgressPrinter>(cfg.train.steps, cfg.train.log_interval, unit, stderr);
    log::info("cleave: {} | {} | model {} ({} blocks in {} stage{}: {}) | batch {} = micro {} x accum {} x dp {} | "
              "data {}",
              s.grid.str(), cfg.parallel.pipeline_model_parallel_size > 1 ? "schedule " + s.plan.schedule.name
                                                                          : std::string("single stage"),
              s.plan.spec.type, s.plan.spec.blocks.size(), s.plan.num_stages(), s.plan.num_stages() == 1 ? "" : "s",
              s.plan.describe_partition(),
              s.batch.global_batch_size, s.batch.micro_batch_size, s.batch.gradient_accumulation_steps,
              s.grid.dp_size(), impl.train_data->describe());
    log::info("throughput: {:.4g} model FLOPs per step (cost model, recomputation not counted; docs/report.md) "
              "shared by {} rank{}; {}",
              impl.throughput.model_flops_per_step, s.world.size(), s.world.size() == 1 ? "" : "s",
              options.peak.per_rank > 0 ? "MFU against the " + options.peak.source
                                        : std::string("no MFU without a peak (cleave train --profile FILE)"));
  }
  // Peak memory counts the model, not whatever earlier runs in this process left behind.
  s.allocator->reset_peak();
  std::int64_t nonfinite_in_a_row = 0;

  TrainSummary summary;
  try {
    for (std::int64_t step = start_step; step < cfg.train.steps; ++step) {
      StepStats stats = this->step(step);
      summary.steps.push_back(stats);
      if (impl.committed_in_step && s.reports()) {
        if (progress) progress->interrupt();
        log::info("checkpoint: step {} committed; the step loop waited {:.1f} ms for it",
                  impl.committed_in_step->first, impl.committed_in_step->second);
      }
      impl.committed_in_step.reset();
      StepMetrics m;
      m.step = step + 1;
      m.loss = stats.loss;
      m.lr = stats.lr;
      m.grad_norm = stats.grad_norm;
      m.tokens_per_s = stats.tokens_per_s;
      m.flops_per_rank = stats.flops_per_rank;
      m.mfu = stats.mfu;
      m.step_ms = stats.step_ms;
      m.peak_bytes = stats.peak_bytes;
      m.extra = stats.routing;
      const bool finite = std::isfinite(stats.loss) && std::isfinite(stats.grad_norm);
      nonfinite_in_a_row = finite ? 0 : nonfinite_in_a_row + 1;
      counts.nonfinite_steps += finite ? 0 : 1;
      counts.skipped_steps += stats.skipped ? 1 : 0;
      m.nonfinite_steps = counts.nonfinite_steps;
      m.skipped_steps = counts.skipped_steps;
      if (resumed && step == start_step) {  // the report marks where the run resumed
        m.counts.emplace_back("resumed_at_step", start_step);
        m.counts.emplace_back("config_changes", static_cast<std::int64_t>(resume_changes.size()));
      }
      if (restart.number > 0 && step == start_step) {  // cleave run's restart: its start-up, load and first step
        m.counts.emplace_back("restart", restart.number);
        m.extra.emplace_back("restart_startup_s", load_began_unix_s - restart.launched_unix_s);
        m.extra.emplace_back("restart_load_s", load_s);
        m.extra.emplace_back("restart_first_step_s", stats.step_ms * 1e-3);
      }
      // Evaluation every eval_interval steps and after the last one, on that step's metrics row.
      const bool last = step + 1 == cfg.train.steps;
      const bool eval_now =
          impl.eval_data && (last || (cfg.train.eval_interval > 0 && (step + 1) % cfg.train.eval_interval == 0));
      if (eval_now) {
        const EvalResult eval = evaluate(cfg.train.eval_batches);
        m.extra.emplace_back("eval_loss", eval.loss);
        m.extra.emplace_back("eval_accuracy", eval.accuracy);
        if (progress) progress->eval(step + 1, eval.loss, eval.accuracy);
        if (last) summary.eval = eval;
      }
      if (metrics) metrics->write(m);
      if (progress) progress->update(m);
      CLEAVE_CHECK(nonfinite_in_a_row <= cfg.train.skip_nonfinite_steps,
                   "training diverged at step {}: loss is {}, gradient norm {} ({} non-finite step{} in a row, "
                   "train.skip_nonfinite_steps is {}); {}. Lower optimizer.lr, check the data and the initial "
                   "weights, or let the run skip such steps (train.skip_nonfinite_steps)",
                   step + 1, stats.loss, stats.grad_norm, nonfinite_in_a_row, nonfinite_in_a_row == 1 ? "" : "s",
                   cfg.train.skip_nonfinite_steps,
                   stats.skipped ? "its update was not applied (the weights are those the step began with)"
                                 : "its update was applied (the gradient norm was finite)");
      const bool periodic = cfg.checkpoint.interval > 0 && (step + 1) % cfg.checkpoint.interval == 0;
      if (periodic || (last && cfg.checkpoint.save_final)) {
        if (progress) progress->interrupt();  // the checkpoint's log line gets a line of its own
        impl.save_in_train_loop(checkpoints, step + 1);
      }
      if (stats.stop_requested) {  // the preemption notice: save this step (unless just saved) and end
        if (progress) progress->interrupt();
        if (!(periodic || (last && cfg.checkpoint.save_final))) impl.save_in_train_loop(checkpoints, step + 1);
        if (impl.pending_save) impl.commit_pending_save();
        if (s.reports()) {
          log::info("stopped on request (SIGUSR1, the preemption notice) after step {}: checkpoint {} saved; "
                    "continue with --resume auto",
                    step + 1, (fs::path(checkpoints) / checkpoint::step_dir_name(step + 1)).string());
        }
        summary.stopped = true;
        break;
      }
    }
    if (impl.pending_save) impl.commit_pending_save();  // the run ends when its last checkpoint is committed
  } catch (const std::exception&) {
    impl.pending_save.reset();  // joins its writer; an error it never reported is logged
    // A run that fails (diverges, loses its disk, a peer's error) still gets its page, of the steps it finished,
    // on world rank 0 (the only rank with a metrics writer). Ranks ended by the watchdog or the launcher get none.
    if (metrics && cfg.train.report) {
      if (progress) progress->interrupt();
      write_report_page(cfg.train.out_dir, " (of the steps before the failure)");
    }
    throw;
  }
  if (cfg.train.trace) write_measured_trace(s, impl.last_timeline, cfg.train.out_dir);
  summary.peak_bytes = summary.steps.empty() ? 0 : summary.steps.back().peak_bytes;
  // Every rank's own peak (the memory a layout needs per device) by category, with its coordinates: run.json
  // for the report, and the per-rank totals on one line.
  report::RunSummary record = gather_run_summary(s);
  record.model_flops_per_step = impl.throughput.model_flops_per_step;
  record.peak_flops_per_rank = impl.throughput.peak.per_rank;
  record.peak_source = impl.throughput.peak.source;
  record.init_from = impl.init_from;
  if (s.reports()) {
    write_run_summary(with_resume(record, cfg.train.out_dir, resumed, start_step, resumed_from, resume_changes),
                      cfg.train.out_dir);
    if (s.world.size() > 1) {
      std::string line;
      for (const auto& r : record.ranks) line += fmt::format("{}r{} {}", r.rank ? ", " : "", r.rank, format_bytes(r.peak_total));
      log::info("peak memory per rank: {}{}", line,
                cfg.device.memory_limit > 0 ? fmt::format(" (cap {})", format_bytes(cfg.device.memory_limit)) : "");
    }
  }
  if (progress) progress->summary(cfg.train.out_dir);
  if (s.reports() && cfg.train.report) write_report_page(cfg.train.out_dir, "");
  summary.completed = true;
  return summary;
}

}  // namespace cleave::train
