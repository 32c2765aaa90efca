// Trainer: builds this rank's plan (grid coordinates, stage partition, schedule, stages) and runs steps.
// The order of everything inside a step is the schedule's (pipeline/executor.cpp), its tail included: the
// executor's REDUCE_GRAD and OPTIMIZER_STEP hooks below finish the gradient reduction, clip and update. This
// file wires the pieces and runs the loop; evaluation.cpp, parameter_gather.cpp and measured_trace.cpp hold
// the rest of Trainer.
#include "engine/train/trainer.hpp"

#include "partition/cost_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optimizer_factory.hpp"
#include "engine/report/html_report.hpp"
#include "engine/train/checkpoint_pieces.hpp"
#include "engine/train/collectives.hpp"
#include "engine/train/config_change.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/trainer_state.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/models/builder.hpp"
#include "pipeline/forward_only.hpp"

namespace cleave::train {
namespace {

using Clock = std::chrono::steady_clock;

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

comm::ProcessGrid make_grid(config::RunConfig& config, int world_size) {
  config.resolve(world_size);
  return comm::ProcessGrid::create(world_size, config.parallel.tensor_model_parallel_size,
                                   config.parallel.pipeline_model_parallel_size, config.parallel.data_parallel_size);
}

// Floating model inputs (mlp / cnn features) in the compute dtype; token ids pass unchanged.
Tensor in_compute_dtype(Trainer::State& s, const Tensor& inputs) {
  if (inputs.dtype() != DType::kF32 || s.context.compute_dtype() == DType::kF32) return inputs;
  Tensor out = Tensor::empty(inputs.shape(), s.context.compute_dtype(), MemoryCategory::kActivations, *s.allocator);
  ops::copy(s.context, inputs, out);
  return out;
}

// REDUCE_GRAD of this rank's last stage: data parallel finishes its buckets (the tied table's copies summed
// first; every replica then holds the mean gradient, or under ZeRO-1 its shard of it); without dp the tied
// table's two copies are summed.
void finish_gradient_reduction(Trainer::State& s) {
  if (s.data_parallel) s.step_dp_bytes = s.data_parallel->end_step().wire_bytes;
  else if (s.tied_table) s.tied_group->all_reduce(s.tied_table->grad, comm::ReduceOp::kSum)->wait();
}

// OPTIMIZER_STEP: the global gradient norm over the replica's model-parallel ranks (each parameter counted
// once), clipping, and the update.
void clip_and_update(Trainer::State& s) {
  if (s.stages_reduced < static_cast<int>(s.stages.size())) finish_gradient_reduction(s);  // no REDUCE_GRAD seen
  const optim::ParamFilter counted = [&s](const layers::Param& p) {
    if (p.shard.dim < 0 && s.coords.tp_rank != 0) return false;  // replicated over tp: tp rank 0 counts it
    return s.counts_tied_table || p.name != s.tied_name;
  };
  const optim::SumReducer across_stages = [&s](double local) {
    return reduce_doubles(*s.model_parallel, {local}, comm::ReduceOp::kSum)[0];
  };
  // With dp > 1 each rank counts its dp shard of every gradient and the sum runs over the whole world.
  s.step_grad_norm =
      s.data_parallel ? std::sqrt(reduce_doubles(s.world, {s.data_parallel->local_grad_sum_of_squares(counted)},
                                                 comm::ReduceOp::kSum)[0])
                      : optim::global_grad_norm(s.params, across_stages, counted, s.context);
  if (s.config.optimizer.grad_clip > 0) {
    if (s.data_parallel) s.data_parallel->clip(s.config.optimizer.grad_clip, s.step_grad_norm);
    else optim::clip_grads(s.params, s.config.optimizer.grad_clip, s.step_grad_norm, s.context);
  }
  s.step_lr = s.lr_schedule.lr_at(s.current_step);
  if (s.optimizer) s.optimizer->step(s.step_lr);
  else s.data_parallel->sharded_step(s.step_lr);
  refresh_working_copies(s);
}

// The step's loss: the mean over the global batch's micro-batches, each micro-batch's loss placed at its
// global index (replica-major, as the data is sharded) and summed in that order on every rank, so one rank
// and any data-parallel layout report the same double. The last stage's tp rank 0 of each replica fills its
// slots and every other slot is zero; x + 0 is exact, so the all_reduce moves values without rounding.
double global_mean_loss(Trainer::State& s, const pipeline::StepOutcome& outcome) {
  const std::int64_t per_replica = s.batch.gradient_accumulation_steps;
  Tensor& all = s.microbatch_losses;
  if (!all.defined()) {
    all = Tensor::empty({per_replica * s.grid.dp_size()}, DType::kF32, MemoryCategory::kCommunication,
                        *s.allocator);
  }
  all.fill_(0.0f);
  const bool contributes = s.holds_stage(s.plan.num_stages() - 1) && s.coords.tp_rank == 0;
  if (contributes) {
    CLEAVE_ASSERT(static_cast<std::int64_t>(outcome.losses.size()) == per_replica,
                  "the last stage computed {} micro-batch losses, expected {}", outcome.losses.size(), per_replica);
    for (const auto& [microbatch, loss] : outcome.losses) {
      all.data<float>()[s.coords.dp_rank * per_replica + microbatch] = loss;
    }
  }
  s.world.all_reduce(all, comm::ReduceOp::kSum)->wait();
  double sum = 0;
  for (float loss : all.span<float>()) sum += static_cast<double>(loss);
  return sum / static_cast<double>(all.numel());
}

// A resumed run's config against the one its checkpoint was trained with (index.json "config"; a checkpoint
// written before that field existed is compared with the run directory's config.json, when there is one).
// Refused on every rank when a key changed that needs --allow-config-change (config_change.hpp).
std::vector<ConfigChange> check_resumed_config(Trainer::State& s, const std::string& step_dir,
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
  throw_if_any_rank_failed(s, error);
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

}  // namespace

// Mixed precision: every parameter's bf16 working copy := its f32 master value (layers/layer_util.hpp).
void refresh_working_copies(Trainer::State& s) { layers::refresh_working_copies(s.params, s.context); }

Trainer::State::State(config::RunConfig c, comm::Communicator& w)
    : config(std::move(c)), world(w), grid(make_grid(config, w.size())), coords(grid.coords_of(w.rank())) {}

Trainer::Trainer(config::RunConfig config, comm::Communicator& world)
    : state_(std::make_unique<State>(std::move(config), world)) {
  State& s = *state_;
  const auto& cfg = s.config;
  CLEAVE_CHECK(cfg.device.type == "cpu",
               "device.type '{}' is not available yet: the trainer runs on the CPU backend (device.type \"cpu\"); "
               "the CUDA backend is reachable through the op seam but not yet brought up for training",
               cfg.device.type);
  CLEAVE_CHECK(cfg.optimizer.zero_stage == 0 || s.grid.dp_size() >= 1, "optimizer.zero_stage must be 0 or 1");
  // The run's own memory and op context: nothing is shared with another trainer in this process.
  s.allocator = make_cpu_allocator();
  if (cfg.device.memory_limit > 0) s.allocator->set_limit(cfg.device.memory_limit);
  s.resources = ops::make_device_resources(Device::cpu());
  s.context.device = Device::cpu();
  s.context.allocator = s.allocator.get();
  s.context.resources = s.resources.get();
  s.context.precision = ops::parse_precision(cfg.device.precision);  // bf16: mixed precision (ops/context.hpp)
  // Deterministic mode: GEMM bits independent of the thread count (shape-fixed slices, OpenBLAS at one
  // thread), so one rank with N threads and N ranks of one thread compute the same bits.
  s.context.gemm_mode = cfg.train.deterministic ? ops::GemmMode::kDeterministic : ops::GemmMode::kFast;
  if (cfg.train.deterministic) ops::configure_cpu_threads(ops::cpu_threads());

  s.batch = cfg.resolved_batch();
  s.groups = comm::build_grid_communicators(world, s.grid);
  s.model_parallel = world.split(s.coords.dp_rank, world.rank(), "model_parallel");
  s.plan = make_plan(cfg, static_cast<int>(s.batch.gradient_accumulation_steps), s.coords.pp_rank);

  // This rank's stages, built from (seed, logical name) so any layout starts from the same weights.
  layers::BuildOptions build;
  build.seed = cfg.train.seed;
  build.tp_size = s.grid.tp_size();
  build.tp_rank = s.coords.tp_rank;
  build.allocator = s.allocator.get();
  build.recompute = partition::parse_recompute(cfg.train.recompute);
  s.tied_name = s.plan.spec.tied_parameters.empty() ? std::string() : s.plan.spec.tied_parameters.front();
  if (s.grid.tp_size() > 1) s.context.tp_comm = s.groups.tp.get();
  for (int stage : s.plan.local_stages) {
    const auto& range = s.plan.partition.stages[static_cast<std::size_t>(stage)];
    auto blocks = layers::build_blocks(s.plan.spec, static_cast<std::size_t>(range.begin),
                                       static_cast<std::size_t>(range.end), build);
    auto module = std::make_unique<pipeline::StageModule>(std::move(blocks), stage == 0,
                                                          stage == s.plan.num_stages() - 1);
    for (const auto& p : module->params()) {
      if (p->name == s.tied_name) build.tied_table = p;  // a later local head shares it
    }
    s.stage_by_index[stage] = module.get();
    s.stages.push_back(std::move(module));
  }
  for (const auto& stage : s.stages) {
    for (const auto& p : stage->params()) {
      if (std::find(s.params.begin(), s.params.end(), p) == s.params.end()) s.params.push_back(p);
    }
  }
  // A tied table whose embedding and head live on different pp ranks exists twice; the embedding group
  // keeps the copies equal by summing their gradients every step.
  // The group is built here rather than taken from the grid's embedding group (first and last pp rank):
  // under ZB-V's V placement the head's stage sits on another rank than the last stage.
  if (s.plan.tied_table_split()) {
    const int embedding_stage = s.plan.stage_of_block(partition::BlockKind::kEmbedding);
    const int head_stage = s.plan.stage_of_block(partition::BlockKind::kLmHead);
    const bool member = s.holds_stage(embedding_stage) || s.holds_stage(head_stage);
    const int replica = s.coords.tp_rank + s.grid.tp_size() * s.coords.dp_rank;
    s.tied_group = world.split(member ? replica : -1, s.coords.pp_rank, "tied_embedding");
    for (const auto& p : s.params) {
      if (p->name == s.tied_name) s.tied_table = p;
    }
    s.counts_tied_table = s.holds_stage(embedding_stage);
  }
  // Data parallel: grads (and, under ZeRO-1, values) become views into flat bucket buffers before any
  // optimizer sees them; the tied table's copies are summed inside the reduction, before dp.
  s.fault = fault_plan_from_env();
  if (s.fault && s.fault->point == FaultPoint::kDpReduce) {
    CLEAVE_CHECK(s.grid.dp_size() > 1, "CLEAVE_FAULT_INJECT: dp_reduce needs data parallelism (dp is 1 in {})",
                 s.grid.str());
  }
  if (s.grid.dp_size() > 1) {
    DataParallelOptions dp_options;
    dp_options.bucket_mib = cfg.parallel.dp_bucket_mb;
    dp_options.grad_wire_dtype = cfg.parallel.grad_reduce_dtype == "bf16" ? DType::kBF16 : DType::kF32;
    dp_options.zero_stage = cfg.optimizer.zero_stage;
    dp_options.optimizer = cfg.optimizer;
    dp_options.context = s.context;
    dp_options.average = false;  // the loss scale below divides by dp
    if (s.fault) {
      dp_options.after_bucket_launch = [&s](int bucket) {
        if (s.fault->due(s.world.rank(), s.current_step + 1, FaultPoint::kDpReduce)) {
          s.fault->fire(fmt::format("after posting data-parallel gradient bucket {}", bucket));
        }
      };
    }
    s.data_parallel = std::make_unique<DataParallel>(s.plan, s.coords.pp_rank, s.stage_by_index, s.params,
                                                     *s.groups.dp, s.tied_group.get(), dp_options);
  }
  // Deterministic mode: micro-batch gradients summed in the canonical order, so that n micro-batches on one
  // rank and the same n spread over dp replicas add the same floats in the same order (sum_tree.hpp).
  // After DataParallel: the accumulator's "home" is each gradient's final storage (a bucket view).
  if (cfg.train.deterministic) {
    std::vector<const layers::Param*> shared;  // held by two local stages (ZB-V's tied table): stays in place
    std::map<const layers::Param*, int> holders;
    for (const auto& stage : s.stages) {
      for (const auto& p : stage->params()) {
        if (++holders[p.get()] == 2) shared.push_back(p.get());
      }
    }
    for (const auto& stage : s.stages) {
      stage->enable_ordered_accumulation(static_cast<int>(s.batch.gradient_accumulation_steps), shared, s.context);
    }
  }
  if (!s.data_parallel || !s.data_parallel->zero1()) {
    s.optimizer = optim::make_optimizer(cfg.optimizer, s.params, *s.allocator);
  }
  s.lr_schedule = optim::LrSchedule::from_config(cfg.optimizer, cfg.train.steps);
  refresh_working_copies(s);  // after DataParallel: under ZeRO-1 the values are bucket views by now

  s.train_data = make_data_source(cfg, Split::kTrain);
  if (cfg.train.eval_batches > 0) s.eval_data = make_data_source(cfg, Split::kEval);
  s.layout.global_batch_size = s.batch.global_batch_size;
  s.layout.micro_batch_size = s.batch.micro_batch_size;
  s.layout.dp_rank = s.coords.dp_rank;
  s.layout.dp_size = s.grid.dp_size();
  s.layout.check();

  pipeline::ExecutorOptions options;
  options.schedule = &s.plan.schedule;
  options.pp_rank = s.coords.pp_rank;
  options.pp_comm = s.grid.pp_size() > 1 ? s.groups.pp.get() : nullptr;
  options.stages = s.stage_by_index;
  const std::int64_t micro = s.batch.micro_batch_size;
  options.boundary_shape = [&plan = s.plan, micro](int stage) { return plan.boundary_shape(stage, micro); };
  options.data = [&s](int microbatch) {
    Batch b = s.train_data->next_batch(s.current_step, microbatch, s.layout, *s.context.allocator);
    return pipeline::MicrobatchData{in_compute_dtype(s, b.inputs), b.targets};
  };
  // dy of each micro-batch's mean loss: 1 / (micro-batches of the global batch), the same factor on one rank
  // and on every replica, so the summed gradient is the global mean without a division after the reduction.
  options.loss_scale =
      1.0f / static_cast<float>(s.batch.gradient_accumulation_steps * static_cast<std::int64_t>(s.grid.dp_size()));
  options.context = &s.context;
  options.record_timeline = cfg.train.trace;
  // The step's tail runs inside the schedule: REDUCE_GRAD after a stage's last weight gradient, then
  // OPTIMIZER_STEP closing the rank's list (pipeline/lowering.hpp).
  options.reduce_grads = [&s](int) {
    if (++s.stages_reduced == static_cast<int>(s.stages.size())) finish_gradient_reduction(s);
  };
  options.optimizer_step = [&s] { clip_and_update(s); };
  if (s.fault && s.fault->point == FaultPoint::kForward) {
    const int victim_microbatch = std::min(1, s.plan.schedule.num_microbatches - 1);
    options.before_compute = [&s, victim_microbatch](const pipeline::Action& a) {
      if (a.kind == pipeline::ActionKind::kForward && a.microbatch == victim_microbatch &&
          s.fault->due(s.world.rank(), s.current_step + 1, FaultPoint::kForward)) {
        s.fault->fire(fmt::format("stage {} forward of micro-batch {}", a.stage, a.microbatch));
      }
    };
  }
  pipeline::ExecutorOptions eval_options = options;
  s.executor = std::make_unique<pipeline::Executor>(std::move(options));

  // Evaluation: a forward-only schedule with the same placement, through the same interpreter.
  if (s.eval_data) {
    s.eval_schedule = pipeline::forward_only_schedule(s.plan.schedule);
    eval_options.mode = pipeline::ExecutorMode::kEvaluate;
    eval_options.schedule = &s.eval_schedule;
    eval_options.record_timeline = false;
    eval_options.reduce_grads = {};
    eval_options.optimizer_step = {};
    eval_options.before_compute = {};
    eval_options.data = [&s](int microbatch) {
      Batch b = s.eval_data->next_batch(s.eval_batch, microbatch, s.layout, *s.context.allocator);
      return pipeline::MicrobatchData{in_compute_dtype(s, b.inputs), b.targets};
    };
    s.eval_executor = std::make_unique<pipeline::Executor>(std::move(eval_options));
  }
}

Trainer::~Trainer() = default;

const config::RunConfig& Trainer::config() const { return state_->config; }

const Plan& Trainer::plan() const { return state_->plan; }

MemoryStats Trainer::memory_stats() const { return state_->allocator->stats(); }

void Trainer::reset_peak_memory() { state_->allocator->reset_peak(); }

StepStats Trainer::step(std::int64_t step) {
  State& s = *state_;
  const auto start = Clock::now();
  s.current_step = step;
  s.stages_reduced = 0;
  if (s.data_parallel) s.data_parallel->begin_step();
  else s.optimizer->zero_grad();
  pipeline::StepOutcome outcome = s.executor->run_step();  // forward, backward, reduction, optimizer
  if (s.config.train.trace) s.last_timeline = std::move(outcome.timeline);

  const double loss = global_mean_loss(s, outcome);
  const auto peaks = reduce_doubles(s.world, {static_cast<double>(s.allocator->stats().peak_total)},
                                    comm::ReduceOp::kMax);
  StepStats stats;
  stats.step = step;
  stats.loss = loss;
  stats.lr = s.step_lr;
  stats.grad_norm = s.step_grad_norm;
  stats.step_ms = elapsed_ms(start);
  const double items = static_cast<double>(s.batch.global_batch_size * s.plan.spec.items_per_sample());
  stats.tokens_per_s = items / (stats.step_ms * 1e-3);
  stats.peak_bytes = static_cast<std::int64_t>(peaks[0]);
  stats.p2p_bytes = outcome.p2p_bytes_sent;
  stats.dp_grad_bytes = s.step_dp_bytes;
  return stats;
}

TrainSummary Trainer::train(const TrainOptions& options) {
  State& s = *state_;
  const auto& cfg = s.config;
  const std::string unit(s.plan.spec.throughput_unit());
  // Resume first: a checkpoint that cannot be loaded fails before anything is written.
  const std::string checkpoints = checkpoint_root();
  std::int64_t start_step = 0;
  bool resumed = false;
  std::string resumed_from;
  std::vector<ConfigChange> resume_changes;
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
      resumed_from = *dir;
      resumed = true;
    }
  }
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<ProgressPrinter> progress;
  if (s.reports()) {
    // A resumed run continues in its own directory: metrics rows after the checkpoint's step are dropped.
    if (options.resume.empty()) prepare_out_dir(cfg.train.out_dir);
    else std::filesystem::create_directories(cfg.train.out_dir);
    if (resumed) keep_previous_config(cfg.train.out_dir, config::to_json(cfg) + "\n", start_step);
    write_text_file(cfg.train.out_dir + "/config.json", config::to_json(cfg) + "\n");
    const std::string metrics_path = cfg.train.out_dir + "/metrics.jsonl";
    if (!options.resume.empty()) keep_metrics_through(metrics_path, start_step);
    metrics = std::make_unique<MetricsWriter>(metrics_path, !options.resume.empty());
    progress = std::make_unique<ProgressPrinter>(cfg.train.steps, cfg.train.log_interval, unit, stderr);
    log::info("cleave: {} | {} | model {} ({} blocks in {} stages: {}) | batch {} = micro {} x accum {} x dp {} | "
              "data {}",
              s.grid.str(), cfg.parallel.pipeline_model_parallel_size > 1 ? "schedule " + s.plan.schedule.name
                                                                          : std::string("single stage"),
              s.plan.spec.type, s.plan.spec.blocks.size(), s.plan.num_stages(), s.plan.describe_partition(),
              s.batch.global_batch_size, s.batch.micro_batch_size, s.batch.gradient_accumulation_steps,
              s.grid.dp_size(), s.train_data->describe());
  }
  // Peak memory counts the model, not whatever earlier runs in this process left behind.
  s.allocator->reset_peak();

  TrainSummary summary;
  try {
    for (std::int64_t step = start_step; step < cfg.train.steps; ++step) {
      StepStats stats = this->step(step);
      summary.steps.push_back(stats);
      StepMetrics m;
      m.step = step + 1;
      m.loss = stats.loss;
      m.lr = stats.lr;
      m.grad_norm = stats.grad_norm;
      m.tokens_per_s = stats.tokens_per_s;
      m.step_ms = stats.step_ms;
      m.peak_bytes = stats.peak_bytes;
      if (resumed && step == start_step) {  // the report marks where the run resumed
        m.extra.emplace_back("resumed_at_step", static_cast<double>(start_step));
        m.extra.emplace_back("config_changes", static_cast<double>(resume_changes.size()));
      }
      // Evaluation every eval_interval steps and after the last one, on that step's metrics row.
      const bool last = step + 1 == cfg.train.steps;
      const bool eval_now =
          s.eval_data && (last || (cfg.train.eval_interval > 0 && (step + 1) % cfg.train.eval_interval == 0));
      if (eval_now) {
        const EvalResult eval = evaluate(cfg.train.eval_batches);
        m.extra.emplace_back("eval_loss", eval.loss);
        m.extra.emplace_back("eval_accuracy", eval.accuracy);
        if (progress) progress->eval(step + 1, eval.loss, eval.accuracy);
        if (last) summary.eval = eval;
      }
      if (metrics) metrics->write(m);
      if (progress) progress->update(m);
      CLEAVE_CHECK(std::isfinite(stats.loss), "training diverged at step {}: loss is {} (lower optimizer.lr?)",
                   step + 1, stats.loss);
      const bool periodic = cfg.checkpoint.interval > 0 && (step + 1) % cfg.checkpoint.interval == 0;
      if (periodic || (last && cfg.checkpoint.save_final)) {
        if (progress) progress->interrupt();  // the checkpoint's log line gets a line of its own
        save_checkpoint(checkpoints, step + 1);
      }
    }
  } catch (const std::exception&) {
    // A run that fails (diverges, loses its disk, a peer's error) still gets its page, of the steps it finished,
    // on world rank 0 (the only rank with a metrics writer). Ranks ended by the watchdog or the launcher get none.
    if (metrics && cfg.train.report) {
      if (progress) progress->interrupt();
      write_report_page(cfg.train.out_dir, " (of the steps before the failure)");
    }
    throw;
  }
  if (cfg.train.trace) write_measured_trace(s, cfg.train.out_dir);
  summary.peak_bytes = summary.steps.empty() ? 0 : summary.steps.back().peak_bytes;
  // Every rank's own peak (the memory a layout needs per device) by category, with its coordinates: run.json
  // for the report, and the per-rank totals on one line.
  const report::RunSummary record = gather_run_summary(s);
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
