// Trainer: builds this rank's plan (grid coordinates, stage partition, schedule, stages) and runs steps.
// The order of work inside a step is the schedule's (pipeline/executor.cpp); this file only wires the
// pieces and does what happens between steps: gradient reduction, clipping, the optimizer, metrics.
#include "engine/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>

#include "engine/comm/grid.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "engine/optim/optimizer_factory.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/data_parallel.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/plan.hpp"
#include "kernels/cpu/blas_runtime.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "layers/models/builder.hpp"
#include "layers/parallel/shard.hpp"
#include "pipeline/executor.hpp"
#include "pipeline/trace.hpp"

namespace cleave::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kTiedTableName = "embed.token";

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Sum (or max) of a few doubles over a communicator, in one collective. Tensors carry no f64, so each value
// travels as its 64-bit pattern in an i64 (exact); every rank then combines the gathered values in rank
// order, so all ranks get the same double and a sum over one rank is the value itself.
std::vector<double> reduce_doubles(comm::Communicator& comm, std::vector<double> values, comm::ReduceOp op) {
  const auto count = static_cast<std::int64_t>(values.size());
  Tensor mine = Tensor::empty({count}, DType::kI64, MemoryCategory::kCommunication);
  std::memcpy(mine.raw_data(), values.data(), values.size() * sizeof(double));
  Tensor all = Tensor::empty({count * comm.size()}, DType::kI64, MemoryCategory::kCommunication);
  comm.all_gather(mine, all)->wait();
  const auto* bytes = static_cast<const char*>(all.raw_data());
  auto gathered = [bytes](std::int64_t index) {
    double v;
    std::memcpy(&v, bytes + index * static_cast<std::int64_t>(sizeof v), sizeof v);
    return v;
  };
  for (std::int64_t i = 0; i < count; ++i) {
    double acc = gathered(i);
    for (int r = 1; r < comm.size(); ++r) {
      const double v = gathered(r * count + i);
      acc = op == comm::ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    values[static_cast<std::size_t>(i)] = acc;
  }
  return values;
}

}  // namespace

struct Trainer::State {
  config::RunConfig config;
  comm::Communicator& world;
  comm::ProcessGrid grid;
  comm::GridCoords coords;
  comm::GridCommunicators groups;
  std::unique_ptr<comm::Communicator> model_parallel;  // tp × pp ranks of this replica (norms, losses)
  std::unique_ptr<comm::Communicator> tied_group;      // the two ranks holding the tied table's copies
  Plan plan;
  config::ResolvedBatch batch;

  std::vector<std::unique_ptr<pipeline::StageModule>> stages;
  std::map<int, pipeline::StageModule*> stage_by_index;
  optim::ParamList params;
  std::shared_ptr<layers::Param> tied_table;  // this rank's copy of the tied table when it is split
  bool counts_tied_table = true;              // false on the last stage's copy (counted once in norms)
  std::unique_ptr<optim::Optimizer> optimizer;  // null under ZeRO-1 (data_parallel holds the sharded one)
  std::unique_ptr<DataParallel> data_parallel;  // dp > 1: bucketed, overlapped reduction; ZeRO-1
  optim::LrSchedule lr_schedule;
  std::unique_ptr<DataSource> train_data;
  std::unique_ptr<DataSource> eval_data;
  BatchLayout layout;
  layers::Context context;
  std::unique_ptr<pipeline::Executor> executor;
  std::int64_t current_step = 0;
  std::vector<pipeline::TimedAction> last_timeline;
  Tensor microbatch_losses;  // [dp * micro-batches] f32: the step's loss of every global micro-batch

  State(config::RunConfig c, comm::Communicator& w)
      : config(std::move(c)),
        world(w),
        grid(make_grid(config, w.size())),
        coords(grid.coords_of(w.rank())) {}

  static comm::ProcessGrid make_grid(config::RunConfig& config, int world_size) {
    config.resolve(world_size);
    return comm::ProcessGrid::create(world_size, config.parallel.tensor_model_parallel_size,
                                     config.parallel.pipeline_model_parallel_size,
                                     config.parallel.data_parallel_size);
  }

  bool holds_stage(int stage) const { return stage_by_index.count(stage) != 0; }
  bool reports() const { return world.rank() == 0; }
};

Trainer::Trainer(config::RunConfig config, comm::Communicator& world)
    : state_(std::make_unique<State>(std::move(config), world)) {
  State& s = *state_;
  const auto& cfg = s.config;
  CLEAVE_CHECK(cfg.device.type == "cpu",
               "device.type '{}' is not available: this build trains on the CPU backend (device.type \"cpu\")",
               cfg.device.type);
  CLEAVE_CHECK(cfg.optimizer.zero_stage == 0 || s.grid.dp_size() >= 1, "optimizer.zero_stage must be 0 or 1");
  if (cfg.device.memory_limit > 0) cpu_allocator().set_limit(cfg.device.memory_limit);
  // Deterministic mode: GEMM bits independent of the thread count, so a rank's threads do not matter.
  kernels::cpu::configure_deterministic_gemm(cfg.train.deterministic);

  s.batch = cfg.resolved_batch();
  s.groups = comm::build_grid_communicators(world, s.grid);
  s.model_parallel = world.split(s.coords.dp_rank, world.rank(), "model_parallel");
  s.plan = make_plan(cfg, static_cast<int>(s.batch.gradient_accumulation_steps), s.coords.pp_rank);

  // This rank's stages, built from (seed, logical name) so any layout starts from the same weights.
  layers::BuildOptions build;
  build.seed = cfg.train.seed;
  build.tp_size = s.grid.tp_size();
  build.tp_rank = s.coords.tp_rank;
  if (s.grid.tp_size() > 1) s.context.tp_comm = s.groups.tp.get();
  for (int stage : s.plan.local_stages) {
    const auto& range = s.plan.partition.stages[static_cast<std::size_t>(stage)];
    auto blocks = layers::build_blocks(s.plan.spec, static_cast<std::size_t>(range.begin),
                                       static_cast<std::size_t>(range.end), build);
    auto module = std::make_unique<pipeline::StageModule>(std::move(blocks), stage == 0,
                                                          stage == s.plan.num_stages() - 1);
    for (const auto& p : module->params()) {
      if (p->name == kTiedTableName) build.tied_table = p;  // a later local head shares it
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
      if (p->name == kTiedTableName) s.tied_table = p;
    }
    s.counts_tied_table = s.holds_stage(embedding_stage);
  }
  // Data parallel: grads (and, under ZeRO-1, values) become views into flat bucket buffers before any
  // optimizer sees them; the tied table's copies are summed inside the reduction, before dp.
  if (s.grid.dp_size() > 1) {
    DataParallelOptions dp_options;
    dp_options.bucket_mib = cfg.parallel.dp_bucket_mb;
    dp_options.zero_stage = cfg.optimizer.zero_stage;
    dp_options.optimizer = cfg.optimizer;
    dp_options.tied_table_name = kTiedTableName;
    dp_options.average = false;  // the loss scale below divides by dp
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
      stage->enable_ordered_accumulation(static_cast<int>(s.batch.gradient_accumulation_steps), shared);
    }
  }
  if (!s.data_parallel || !s.data_parallel->zero1()) s.optimizer = optim::make_optimizer(cfg.optimizer, s.params);
  s.lr_schedule = optim::LrSchedule::from_config(cfg.optimizer, cfg.train.steps);

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
    return pipeline::MicrobatchData{b.inputs, b.targets};
  };
  // dy of each micro-batch's mean loss: 1 / (micro-batches of the global batch), the same factor on one rank
  // and on every replica, so the summed gradient is the global mean without a division after the reduction.
  options.loss_scale =
      1.0f / static_cast<float>(s.batch.gradient_accumulation_steps * static_cast<std::int64_t>(s.grid.dp_size()));
  options.context = &s.context;
  options.record_timeline = cfg.train.trace;
  s.executor = std::make_unique<pipeline::Executor>(std::move(options));
}

Trainer::~Trainer() = default;

namespace {

// The step's loss: the mean over the global batch's micro-batches, each micro-batch's loss placed at its
// global index (replica-major, as the data is sharded) and summed in that order on every rank, so one rank
// and any data-parallel layout report the same double. The last stage's tp rank 0 of each replica fills its
// slots and every other slot is zero; x + 0 is exact, so the all_reduce moves values without rounding.
double global_mean_loss(Trainer::State& s, const pipeline::StepOutcome& outcome) {
  const std::int64_t per_replica = s.batch.gradient_accumulation_steps;
  Tensor& all = s.microbatch_losses;
  if (!all.defined()) {
    all = Tensor::empty({per_replica * s.grid.dp_size()}, DType::kF32, MemoryCategory::kCommunication);
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

}  // namespace

const config::RunConfig& Trainer::config() const { return state_->config; }

StepStats Trainer::step(std::int64_t step) {
  State& s = *state_;
  const auto start = Clock::now();
  s.current_step = step;
  if (s.data_parallel) s.data_parallel->begin_step();
  else s.optimizer->zero_grad();
  pipeline::StepOutcome outcome = s.executor->run_step();
  if (s.config.train.trace) s.last_timeline = std::move(outcome.timeline);

  // Data parallel: buckets were reduced during the backward (the tied table's copies summed first);
  // finish them. Every replica then holds the mean gradient (ZeRO-1: its shard of it).
  if (s.data_parallel) s.data_parallel->end_step();
  else if (s.tied_table) s.tied_group->all_reduce(s.tied_table->grad, comm::ReduceOp::kSum)->wait();

  // Global norm over the replica's model-parallel ranks, each parameter counted once.
  const optim::ParamFilter counted = [&s](const layers::Param& p) {
    if (p.shard.dim < 0 && s.coords.tp_rank != 0) return false;  // replicated over tp: tp rank 0 counts it
    return s.counts_tied_table || p.name != kTiedTableName;
  };
  const optim::SumReducer across_stages = [&s](double local) {
    return reduce_doubles(*s.model_parallel, {local}, comm::ReduceOp::kSum)[0];
  };
  // With dp > 1 each rank counts its dp shard of every gradient and the sum runs over the whole world.
  const double grad_norm =
      s.data_parallel ? std::sqrt(reduce_doubles(s.world, {s.data_parallel->local_grad_sum_of_squares(counted)},
                                                 comm::ReduceOp::kSum)[0])
                      : optim::global_grad_norm(s.params, across_stages, counted);
  if (s.config.optimizer.grad_clip > 0) {
    if (s.data_parallel) s.data_parallel->clip(s.config.optimizer.grad_clip, grad_norm);
    else optim::clip_grads(s.params, s.config.optimizer.grad_clip, grad_norm);
  }
  const double lr = s.lr_schedule.lr_at(step);
  if (s.optimizer) s.optimizer->step(lr);
  else s.data_parallel->sharded_step(lr);

  const double loss = global_mean_loss(s, outcome);
  const auto peaks = reduce_doubles(
      s.world, {static_cast<double>(cpu_allocator().stats().peak_total)}, comm::ReduceOp::kMax);

  StepStats stats;
  stats.step = step;
  stats.loss = loss;
  stats.lr = lr;
  stats.grad_norm = grad_norm;
  stats.step_ms = elapsed_ms(start);
  const double items = static_cast<double>(s.batch.global_batch_size * s.plan.spec.items_per_sample());
  stats.tokens_per_s = items / (stats.step_ms * 1e-3);
  stats.peak_bytes = static_cast<std::int64_t>(peaks[0]);
  return stats;
}

EvalResult Trainer::evaluate(std::int64_t batches) {
  State& s = *state_;
  CLEAVE_ASSERT(s.eval_data != nullptr, "evaluate() without an evaluation data source");
  const int last = s.plan.num_stages() - 1;
  double loss_sum = 0, correct = 0, items = 0;
  for (std::int64_t b = 0; b < batches; ++b) {
    for (std::int64_t mb = 0; mb < s.layout.microbatches(); ++mb) {
      Batch batch;
      if (s.holds_stage(0) || s.holds_stage(last)) batch = s.eval_data->next_batch(b, mb, s.layout);
      Tensor h;
      for (int stage = 0; stage <= last; ++stage) {
        if (!s.holds_stage(stage)) continue;
        if (stage == 0) {
          h = batch.inputs;
        } else if (!s.holds_stage(stage - 1)) {
          h = Tensor::empty(s.plan.boundary_shape(stage, s.layout.micro_batch_size), DType::kF32,
                            MemoryCategory::kActivations);
          s.groups.pp->batch_p2p({comm::P2POp::recv(h, s.plan.stage_to_rank(stage - 1))})->wait();
        }
        h = s.stage_by_index[stage]->infer(h, s.context, /*skip_loss=*/stage == last);
        if (stage < last && !s.holds_stage(stage + 1)) {
          s.groups.pp->batch_p2p({comm::P2POp::send(h, s.plan.stage_to_rank(stage + 1))})->wait();
        }
      }
      if (s.holds_stage(last) && s.coords.tp_rank == 0) {
        const std::int64_t classes = h.shape().last();
        const std::int64_t rows = h.numel() / classes;
        Tensor lse = Tensor::empty({rows}, DType::kF32, MemoryCategory::kWorkspace);
        const std::int32_t* targets = batch.targets.data<std::int32_t>();
        loss_sum += kernels::cpu::softmax_cross_entropy_forward(h.data<float>(), targets, lse.data<float>(), rows,
                                                               classes);
        const float* logits = h.data<float>();
        for (std::int64_t r = 0; r < rows; ++r) {
          if (targets[r] < 0) continue;
          const float* row = logits + r * classes;
          correct += (std::max_element(row, row + classes) - row) == targets[r] ? 1 : 0;
          items += 1;
        }
      }
    }
  }
  const auto sums = reduce_doubles(s.world, {loss_sum, correct, items}, comm::ReduceOp::kSum);
  EvalResult result;
  result.items = static_cast<std::int64_t>(std::llround(sums[2]));
  result.loss = result.items > 0 ? sums[0] / sums[2] : 0.0;
  result.accuracy = result.items > 0 ? sums[1] / sums[2] : 0.0;
  return result;
}

std::map<std::string, std::vector<float>> Trainer::gather_parameters() {
  State& s = *state_;
  // Which rank holds which name: every rank publishes "name\n" lines. For each name, replica 0 (dp 0)
  // supplies it: per tp rank the lowest world rank holding it broadcasts its shard and its ShardSpec, and
  // every rank places the shards into the logical tensor. Names travel as bytes in an i32 tensor.
  std::string mine;
  for (const auto& p : s.params) mine += p->name + "\n";
  Tensor length = Tensor::empty({1}, DType::kI64, MemoryCategory::kCommunication);
  length.data<std::int64_t>()[0] = static_cast<std::int64_t>(mine.size());
  Tensor lengths = Tensor::empty({s.world.size()}, DType::kI64, MemoryCategory::kCommunication);
  s.world.all_gather(length, lengths)->wait();
  std::int64_t longest = 1;
  for (std::int64_t v : lengths.span<std::int64_t>()) longest = std::max(longest, v);
  Tensor text = Tensor::zeros({longest}, DType::kI32, MemoryCategory::kCommunication);
  for (std::size_t i = 0; i < mine.size(); ++i) text.data<std::int32_t>()[i] = static_cast<unsigned char>(mine[i]);
  Tensor texts = Tensor::empty({longest * s.world.size()}, DType::kI32, MemoryCategory::kCommunication);
  s.world.all_gather(text, texts)->wait();

  std::map<std::string, std::map<int, int>> holders;  // name -> tp rank -> lowest world rank in replica 0
  for (int r = 0; r < s.world.size(); ++r) {
    const comm::GridCoords c = s.grid.coords_of(r);
    if (c.dp_rank != 0) continue;
    std::string line;
    const std::int32_t* chars = texts.data<std::int32_t>() + r * longest;
    for (std::int64_t i = 0; i < lengths.data<std::int64_t>()[r]; ++i) {
      if (chars[i] == '\n') {
        holders[line].try_emplace(c.tp_rank, r);
        line.clear();
      } else {
        line += static_cast<char>(chars[i]);
      }
    }
  }
  constexpr int kMeta = 4 + Shape::kMaxDims + 2;  // numel, dim, parts, index, groups, rank, logical dims
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, by_tp] : holders) {
    std::vector<float> logical;
    for (const auto& [tp_rank, rank] : by_tp) {
      std::shared_ptr<layers::Param> local;
      if (rank == s.world.rank()) {
        for (const auto& p : s.params) {
          if (p->name == name) local = p;
        }
      }
      Tensor meta = Tensor::zeros({kMeta}, DType::kI64, MemoryCategory::kCommunication);
      if (local) {
        std::int64_t* m = meta.data<std::int64_t>();
        const layers::ShardSpec& spec = local->shard;
        m[0] = local->value.numel();
        m[1] = spec.dim;
        m[2] = spec.parts;
        m[3] = spec.index;
        m[4] = spec.groups;
        m[5] = spec.logical.rank();
        for (int d = 0; d < spec.logical.rank(); ++d) m[6 + d] = spec.logical[d];
      }
      s.world.broadcast(meta, rank)->wait();
      const std::int64_t* m = meta.data<std::int64_t>();
      if (m[1] < 0 && tp_rank != 0) continue;  // replicated: tp rank 0's copy is the logical tensor
      Tensor values = local ? local->value.view({local->value.numel()})
                            : Tensor::empty({m[0]}, DType::kF32, MemoryCategory::kCommunication);
      s.world.broadcast(values, rank)->wait();
      if (m[1] < 0) {
        logical = values.to_floats();
        continue;
      }
      layers::ShardSpec spec;
      spec.dim = static_cast<int>(m[1]);
      spec.parts = static_cast<int>(m[2]);
      spec.index = static_cast<int>(m[3]);
      spec.groups = static_cast<int>(m[4]);
      spec.logical = Shape(std::span<const std::int64_t>(m + 6, static_cast<std::size_t>(m[5])));
      layers::place_shard(logical, values.to_floats(), spec);
    }
    out[name] = std::move(logical);
  }
  return out;
}

namespace {

// Measured timelines of every pp rank of replica 0 (dp 0, tp 0), merged on world rank 0. Each action
// travels as 5 i64: kind, stage, micro-batch, start and end in ns.
pipeline::Timeline gather_timeline(Trainer::State& s) {
  pipeline::Timeline timeline;
  if (s.coords.dp_rank != 0 || s.coords.tp_rank != 0) return timeline;
  comm::Communicator* pp = s.groups.pp.get();
  const int pp_size = s.grid.pp_size();
  const auto n = static_cast<std::int64_t>(s.last_timeline.size());
  Tensor counts = Tensor::empty({pp_size}, DType::kI64, MemoryCategory::kCommunication);
  Tensor count = Tensor::empty({1}, DType::kI64, MemoryCategory::kCommunication);
  count.data<std::int64_t>()[0] = n;
  if (pp != nullptr && pp_size > 1) pp->all_gather(count, counts)->wait();
  else counts.copy_from(count);
  std::int64_t longest = 1;
  for (auto c : counts.span<std::int64_t>()) longest = std::max(longest, c);
  Tensor mine = Tensor::zeros({longest * 5}, DType::kI64, MemoryCategory::kCommunication);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& t = s.last_timeline[static_cast<std::size_t>(i)];
    std::int64_t* row = mine.data<std::int64_t>() + i * 5;
    row[0] = static_cast<std::int64_t>(t.action.kind);
    row[1] = t.action.stage;
    row[2] = t.action.microbatch;
    row[3] = static_cast<std::int64_t>(t.start * 1e3);
    row[4] = static_cast<std::int64_t>(t.end * 1e3);
  }
  Tensor all = Tensor::empty({longest * 5 * pp_size}, DType::kI64, MemoryCategory::kCommunication);
  if (pp != nullptr && pp_size > 1) pp->all_gather(mine, all)->wait();
  else all.copy_from(mine);
  if (!s.reports()) return timeline;

  timeline.ranks.resize(static_cast<std::size_t>(pp_size));
  std::int64_t origin = std::numeric_limits<std::int64_t>::max();
  for (int r = 0; r < pp_size; ++r) {
    for (std::int64_t i = 0; i < counts.data<std::int64_t>()[r]; ++i) {
      origin = std::min(origin, all.data<std::int64_t>()[(r * longest + i) * 5 + 3]);
    }
  }
  for (int r = 0; r < pp_size; ++r) {
    for (std::int64_t i = 0; i < counts.data<std::int64_t>()[r]; ++i) {
      const std::int64_t* row = all.data<std::int64_t>() + (r * longest + i) * 5;
      pipeline::TimedAction t;
      t.action = {static_cast<pipeline::ActionKind>(row[0]), static_cast<int>(row[1]), static_cast<int>(row[2])};
      t.start = static_cast<double>(row[3] - origin) * 1e-6;  // ms
      t.end = static_cast<double>(row[4] - origin) * 1e-6;
      timeline.ranks[static_cast<std::size_t>(r)].push_back(t);
    }
  }
  return timeline;
}

// The merged measured timeline as a Chrome trace and an SVG (world rank 0 writes).
void write_measured_trace(Trainer::State& s, const std::string& directory) {
  const pipeline::Timeline timeline = gather_timeline(s);
  if (!s.reports()) return;
  const int pp_size = s.grid.pp_size();
  const auto stats = pipeline::timeline_stats(timeline);
  pipeline::TraceOptions options;
  options.title = fmt::format("measured: {} on {} pp ranks, {} micro-batches (last step)", s.plan.schedule.name,
                              pp_size, s.plan.schedule.num_microbatches);
  options.subtitle = fmt::format("makespan {:.2f} ms | bubble_fraction {:.3f} | stage_bubble_fraction {:.3f}",
                                 stats.makespan, stats.bubble_fraction, stats.stage_bubble_fraction);
  options.unit = "ms";
  options.microseconds_per_unit = 1000.0;
  pipeline::write_chrome_trace(timeline, directory + "/trace.json", options);
  pipeline::write_timeline_svg(s.plan.schedule, timeline, directory + "/trace.svg", options);
}

}  // namespace

pipeline::Timeline Trainer::measured_timeline() {
  CLEAVE_CHECK(state_->config.train.trace, "measured_timeline() needs train.trace = true");
  return gather_timeline(*state_);
}

const Plan& Trainer::plan() const { return state_->plan; }

TrainSummary Trainer::train() {
  State& s = *state_;
  const auto& cfg = s.config;
  const std::string unit = s.plan.spec.type == "gpt" ? "tok" : "samples";
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<ProgressPrinter> progress;
  if (s.reports()) {
    prepare_out_dir(cfg.train.out_dir);
    std::ofstream(cfg.train.out_dir + "/config.json") << config::to_json(cfg) << "\n";
    metrics = std::make_unique<MetricsWriter>(cfg.train.out_dir + "/metrics.jsonl");
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
  cpu_allocator().reset_peak();

  TrainSummary summary;
  for (std::int64_t step = 0; step < cfg.train.steps; ++step) {
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
    const bool eval_now = s.eval_data && cfg.train.eval_interval > 0 && (step + 1) % cfg.train.eval_interval == 0 &&
                          step + 1 < cfg.train.steps;
    if (eval_now) {
      const EvalResult eval = evaluate(cfg.train.eval_batches);
      m.extra.emplace_back("eval_loss", eval.loss);
      m.extra.emplace_back("eval_accuracy", eval.accuracy);
      if (progress) progress->eval(step + 1, eval.loss, eval.accuracy);
    }
    if (metrics) metrics->write(m);
    if (progress) progress->update(m);
    CLEAVE_CHECK(std::isfinite(stats.loss), "training diverged at step {}: loss is {} (lower optimizer.lr?)",
                 step + 1, stats.loss);
  }
  if (s.eval_data) {
    summary.eval = evaluate(cfg.train.eval_batches);
    if (progress) progress->eval(cfg.train.steps, summary.eval.loss, summary.eval.accuracy);
  }
  if (cfg.train.trace) write_measured_trace(s, cfg.train.out_dir);
  summary.peak_bytes = summary.steps.empty() ? 0 : summary.steps.back().peak_bytes;
  // Every rank's own peak (the memory a layout needs per device), on one line.
  Tensor mine = Tensor::empty({1}, DType::kI64, MemoryCategory::kWorkspace);
  mine.data<std::int64_t>()[0] = cpu_allocator().stats().peak_total;
  Tensor peaks = Tensor::empty({s.world.size()}, DType::kI64, MemoryCategory::kWorkspace);
  s.world.all_gather(mine, peaks)->wait();
  if (s.reports() && s.world.size() > 1) {
    std::string line;
    for (int r = 0; r < s.world.size(); ++r) {
      line += fmt::format("{}r{} {}", r ? ", " : "", r, format_bytes(peaks.data<std::int64_t>()[r]));
    }
    log::info("peak memory per rank: {}{}", line,
              cfg.device.memory_limit > 0 ? fmt::format(" (cap {})", format_bytes(cfg.device.memory_limit)) : "");
  }
  if (progress) progress->summary(cfg.train.out_dir);
  summary.completed = true;
  return summary;
}

}  // namespace cleave::train
