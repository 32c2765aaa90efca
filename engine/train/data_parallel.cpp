// DataParallel's construction (data_parallel.hpp): the ready order, the bucketers (main, the split tied table's, the
// experts') with every parameter's grad view adopted, the shards and the sharded optimizer or ZeRO-3's parameter
// store, and the stages' callbacks. The step's reduction is in data_parallel_step.cpp, the ZeRO shards' norm,
// clipping and update in data_parallel_shards.cpp. Invariant: a parameter's own gradient is released before its
// bucketer allocates the replacement (release_grads), so construction never holds a gradient twice.
#include "engine/train/data_parallel.hpp"

#include <algorithm>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "kernels/ops/ops.hpp"
#include "pipeline/action.hpp"

namespace cleave::train {
namespace {

using ParamPtr = std::shared_ptr<layers::Param>;

// Local stages in the order their last weight-gradient pass runs (the executor marks a stage's last W or B
// action of the step as final).
std::vector<int> stages_by_final_weight_pass(const run_plan::Plan& plan, int pp_rank,
                                             const std::map<int, pipeline::StageModule*>& stages) {
  std::map<int, std::size_t> last;
  const auto& actions = plan.schedule.ranks.at(static_cast<std::size_t>(pp_rank));
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (pipeline::frees_stash(actions[i].kind)) last[actions[i].stage] = i;
  }
  std::vector<int> order;
  for (const auto& [stage, module] : stages) {
    (void)module;
    CLEAVE_ASSERT(last.count(stage) != 0, "data parallel: stage {} has no weight-gradient action on pp rank {}", stage,
                  pp_rank);
    order.push_back(stage);
  }
  std::sort(order.begin(), order.end(), [&last](int a, int b) { return last[a] < last[b]; });
  return order;
}

std::vector<comm::GradientSpec> specs_of(const std::vector<ParamPtr>& params) {
  std::vector<comm::GradientSpec> specs;
  for (const auto& p : params) {
    CLEAVE_ASSERT(p->grad.defined() && p->grad.shape() == p->value.shape(),
                  "data parallel: parameter {} has no grad of its value's shape", p->name);
    specs.push_back({p->name, p->grad.shape(), p->grad.dtype()});
  }
  return specs;
}

// Drops the parameters' own gradients once their specs are taken: a bucketer allocates their replacements (its
// buffers, whose views become the grads), and the two must never be alive together, or the allocator's gradient
// peak is each released tensor twice at construction (2x the gradients at ep 1; the experts' twice at ep > 1), a
// peak no step reaches and the memory plan does not count, which a device.memory_limit near the plan would refuse.
void release_grads(const std::vector<ParamPtr>& params) {
  for (const auto& p : params) p->grad = Tensor();
}

// The tied table's parameter name (the embedding's and the head's copy), empty when the model ties none.
std::string tied_table_name(const run_plan::Plan& plan) {
  return plan.spec.tied_parameters.empty() ? std::string() : plan.spec.tied_parameters.front();
}

// How often each parameter is reported per step: once per local stage listing it, plus once more for a
// tied table whose embedding and head sit in the same stage (the stage lists it once, both blocks report).
std::unordered_map<const layers::Param*, int> expected_reports(const run_plan::Plan& plan,
                                                              const std::map<int, pipeline::StageModule*>& stages,
                                                              const std::string& tied_name) {
  std::unordered_map<const layers::Param*, int> reports;
  for (const auto& [stage, module] : stages) {
    for (const auto& p : module->params()) ++reports[p.get()];
  }
  const int embedding_stage = plan.stage_of_block(partition::BlockKind::kEmbedding);
  if (!tied_name.empty() && embedding_stage >= 0 &&
      embedding_stage == plan.stage_of_block(partition::BlockKind::kLmHead) && stages.count(embedding_stage) != 0) {
    for (const auto& p : stages.at(embedding_stage)->params()) {
      if (p->name == tied_name) ++reports[p.get()];
    }
  }
  return reports;
}

// Ready order: stages by their last W pass, each in reverse forward order; a shared parameter at its
// last occurrence.
// ZeRO-3 cuts buckets at blocks: a parameter's unit is its first block in the stage where it is reported last.
struct ReadyOrder {
  std::vector<ParamPtr> sequence;
  std::unordered_map<const layers::Param*, int> unit_of;
  std::unordered_map<const layers::Param*, int> stage_of;  // where it is reported last
  int units = 0;
};
ReadyOrder ready_order_of(const run_plan::Plan& plan, int pp_rank, const std::map<int, pipeline::StageModule*>& stages) {
  ReadyOrder ready;
  for (int stage : stages_by_final_weight_pass(plan, pp_rank, stages)) {
    const pipeline::StageModule& module = *stages.at(stage);
    const auto& local = module.params();
    std::map<int, int> unit_of_block;
    for (auto it = local.rbegin(); it != local.rend(); ++it) {
      ready.sequence.erase(std::remove(ready.sequence.begin(), ready.sequence.end(), *it), ready.sequence.end());
      ready.sequence.push_back(*it);
      const auto [unit, added] = unit_of_block.try_emplace(module.lowest_block_of(**it), ready.units);
      ready.units += added ? 1 : 0;
      ready.unit_of[it->get()] = unit->second;
      ready.stage_of[it->get()] = stage;
    }
  }
  return ready;
}

// The main bucketer's options (its on_release aside): the bucket size, the 1/dp scale, the ZeRO stage's reduction,
// the wire dtype, per-micro-batch reduction. Collectives run on the run's stream, after the kernels that produced
// their inputs (docs/cuda.md, "Communication").
comm::BucketerOptions bucket_options_of(const DataParallelOptions& options, int dp_size, bool per_microbatch) {
  comm::BucketerOptions bucket_options;
  bucket_options.bucket_mib = options.bucket_mib;
  bucket_options.scale = options.average ? 1.0f / static_cast<float>(dp_size) : 1.0f;
  bucket_options.reduction = options.zero_stage >= 2   ? comm::BucketReduction::kReduceScatterOwned
                             : options.zero_stage == 1 ? comm::BucketReduction::kReduceScatter
                                                       : comm::BucketReduction::kAllReduce;
  bucket_options.wire_dtype = options.grad_wire_dtype;
  bucket_options.per_microbatch = per_microbatch;
  bucket_options.pack_units = per_microbatch && options.zero_stage == 2;
  bucket_options.after_launch = options.after_bucket_launch;
  return bucket_options;
}

// The main bucketer's gradients in ready order, with the units that cut its buckets: ZeRO-3 one per block;
// per-micro-batch ZeRO-2 whole blocks of one stage per bucket, a table several blocks write alone.
std::vector<comm::GradientSpec> bucket_specs(const std::vector<ParamPtr>& order, const ReadyOrder& ready,
                                             const std::unordered_map<const layers::Param*, int>& reports,
                                             int zero_stage, bool per_microbatch) {
  std::vector<comm::GradientSpec> specs = specs_of(order);
  if (zero_stage == 3) {
    for (std::size_t i = 0; i < specs.size(); ++i) specs[i].unit = ready.unit_of.at(order[i].get());
  } else if (per_microbatch) {  // whole blocks of one stage per bucket; a table several blocks write alone
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const layers::Param* p = order[i].get();
      const bool shared = reports.at(p) > 1;
      specs[i].unit = shared ? ready.units + static_cast<int>(i) : ready.unit_of.at(p);
      specs[i].group = shared ? -2 - static_cast<int>(i) : ready.stage_of.at(p);
    }
  }
  return specs;
}

}  // namespace

DataParallel::DataParallel(const run_plan::Plan& plan, int pp_rank, const std::map<int, pipeline::StageModule*>& stages,
                           const optim::ParamList& params, comm::Communicator& dp, comm::Communicator* tied_group,
                           const DataParallelOptions& options)
    : options_(options), dp_(dp), tied_group_(tied_group) {
  CLEAVE_CHECK(options.zero_stage >= 0 && options.zero_stage <= 3, "optimizer.zero_stage must be 0 to 3, got {}",
               options.zero_stage);
  const std::string tied_name = tied_table_name(plan);
  const std::unordered_map<const layers::Param*, int> reports = expected_reports(plan, stages, tied_name);
  const ReadyOrder ready = ready_order_of(plan, pp_rank, stages);
  CLEAVE_ASSERT(ready.sequence.size() == optim::unique_params(params).size(),
                "data parallel: the stages list {} parameters, the trainer {}", ready.sequence.size(),
                optim::unique_params(params).size());
  CLEAVE_ASSERT(tied_group_ == nullptr || plan.tied_table_split(), "data parallel: a tied group without a split tied table");
  split_ready_order(ready.sequence, tied_name, reports);
  {
    optim::ParamList all(order_.begin(), order_.end());  // what clip() scales without ZeRO, listed once
    if (split_table_) all.push_back(split_table_);
    all.insert(all.end(), expert_order_.begin(), expert_order_.end());
    clip_params_ = optim::unique_params(all);
  }
  const bool per_microbatch = options.per_microbatch && options.zero_stage >= 2;
  make_bucketers(bucket_specs(order_, ready, reports, options.zero_stage, per_microbatch), ready.unit_of, reports,
                 per_microbatch);
  // What an unsharded optimizer holds: one f32 tensor per parameter per state kind.
  std::int64_t elements = 0;
  for (const auto& p : ready.sequence) elements += p->value.numel();
  const std::int64_t state_bytes = make_shards_and_optimizer(stages);
  log_layout(elements, state_bytes, per_microbatch);
  connect_stages(stages, per_microbatch);
}

std::vector<std::shared_ptr<layers::Param>> DataParallel::table_order() const {
  return split_table_ ? std::vector<ParamPtr>{split_table_} : std::vector<ParamPtr>{};
}

void DataParallel::split_ready_order(const std::vector<ParamPtr>& sequence, const std::string& tied_name,
                                     const std::unordered_map<const layers::Param*, int>& reports) {
  if (tied_group_ != nullptr) {
    for (const auto& p : sequence) {
      if (p->name == tied_name) split_table_ = p;
    }
    CLEAVE_ASSERT(split_table_ != nullptr, "data parallel: a tied group but no parameter '{}' on this rank",
                  tied_name);
    const auto found = reports.find(split_table_.get());
    const int table_reports = found == reports.end() ? 0 : found->second;
    CLEAVE_ASSERT(table_reports == 1, "data parallel: the split tied table is reported {} times", table_reports);
  }
  for (const auto& p : sequence) {
    if (p == split_table_) continue;
    if (p->ep_size > 1) {
      CLEAVE_ASSERT(options_.expert_replicas != nullptr,
                    "data parallel: expert-parallel parameter {} without an expert-dp group", p->name);
      expert_order_.push_back(p);
    } else {
      order_.push_back(p);
    }
  }
}

void DataParallel::adopt_grads(comm::GradientBucketer& bucketer, const std::vector<ParamPtr>& order,
                               const std::unordered_map<const layers::Param*, int>& reports) {
  for (int i = 0; i < bucketer.num_grads(); ++i) {
    layers::Param* p = order[static_cast<std::size_t>(i)].get();
    p->grad = bucketer.grad(i);
    const auto found = reports.find(p);
    entries_[p] = Entry{p, &bucketer, i, found == reports.end() ? 0 : found->second, 0};
  }
}

void DataParallel::make_bucketers(std::vector<comm::GradientSpec> specs,
                                  const std::unordered_map<const layers::Param*, int>& unit_of,
                                  const std::unordered_map<const layers::Param*, int>& reports, bool per_microbatch) {
  Allocator& allocator = *options_.context.allocator;
  const Stream& stream = *options_.context.stream;
  const comm::BucketerOptions main_options = bucket_options_of(options_, dp_.size(), per_microbatch);
  comm::BucketerOptions bucket_options = main_options;
  // ZeRO-2: a reduced bucket's full buffer goes back to the allocator; its parameters' grad views with it.
  bucket_options.on_release = [this](int b) {
    const auto& bucket = bucketer_->bucket(b);
    for (int i = bucket.first_grad; i < bucket.end_grad; ++i) order_[static_cast<std::size_t>(i)]->grad = Tensor();
  };
  release_grads(order_);
  bucketer_ = std::make_unique<comm::GradientBucketer>(std::move(specs), dp_, bucket_options, allocator, stream);
  adopt_grads(*bucketer_, order_, reports);
  if (split_table_) {
    const std::vector<ParamPtr> table = table_order();
    comm::BucketerOptions table_options = main_options;
    table_options.on_release = [this](int) { split_table_->grad = Tensor(); };
    table_options.per_microbatch = false;  // summed over the tied group once per step, then reduced
    table_options.pack_units = false;
    std::vector<comm::GradientSpec> table_specs = specs_of(table);
    release_grads(table);
    table_bucketer_ = std::make_unique<comm::GradientBucketer>(std::move(table_specs), dp_, table_options, allocator,
                                                               stream);
    adopt_grads(*table_bucketer_, table, reports);  // reported once (checked in split_ready_order)
  }
  if (!expert_order_.empty()) {
    // ZeRO-2 and 3: the expert-dp group reduce-scatters into owned shards too (the grad views of a released bucket
    // dropped); once per step whatever optimizer.zero_reduce says (its buffers live through the backward). ZeRO-3
    // cuts its buckets at the same blocks as the main ones: a moe block's units are its non-expert parameters'
    // (over dp × cp) and its experts' (over expert-dp).
    comm::BucketerOptions expert_options = main_options;
    expert_options.on_release = [this](int b) {
      const auto& bucket = expert_bucketer_->bucket(b);
      for (int i = bucket.first_grad; i < bucket.end_grad; ++i) expert_order_[static_cast<std::size_t>(i)]->grad = Tensor();
    };
    expert_options.per_microbatch = false;
    expert_options.pack_units = false;
    expert_options.after_launch = {};
    expert_options.scale = options_.average ? 1.0f / static_cast<float>(options_.expert_replicas->size()) : 1.0f;
    std::vector<comm::GradientSpec> expert_specs = specs_of(expert_order_);
    if (options_.zero_stage == 3) {
      for (std::size_t i = 0; i < expert_specs.size(); ++i) expert_specs[i].unit = unit_of.at(expert_order_[i].get());
    }
    release_grads(expert_order_);
    expert_bucketer_ = std::make_unique<comm::GradientBucketer>(std::move(expert_specs), *options_.expert_replicas,
                                                              expert_options, allocator, stream);
    adopt_grads(*expert_bucketer_, expert_order_, reports);
  }
  for (int b = 0; b < bucketer_->num_buckets(); ++b) {
    const auto& bucket = bucketer_->bucket(b);
    unready_in_bucket_.push_back(bucket.end_grad - bucket.first_grad);
  }
}

std::int64_t DataParallel::make_shards_and_optimizer(const std::map<int, pipeline::StageModule*>& stages) {
  const std::vector<ParamPtr> table = table_order();
  if (options_.zero_stage == 1 || options_.zero_stage == 2) {
    values_ = flatten_values(*bucketer_, order_);
    if (table_bucketer_) table_values_ = flatten_values(*table_bucketer_, table);
    if (expert_bucketer_) expert_values_ = flatten_values(*expert_bucketer_, expert_order_);
  }
  shards_ = make_shards(*bucketer_, order_, values_, dp_);
  if (table_bucketer_) {
    for (auto& shard : make_shards(*table_bucketer_, table, table_values_, dp_)) shards_.push_back(std::move(shard));
  }
  if (expert_bucketer_) {
    for (auto& shard : make_shards(*expert_bucketer_, expert_order_, expert_values_, *options_.expert_replicas)) {
      shards_.push_back(std::move(shard));
    }
  }
  if (options_.zero_stage == 3) make_parameter_shards(stages);
  Allocator& allocator = *options_.context.allocator;
  const std::int64_t state_before = allocator.stats().current_of(MemoryCategory::kOptimizerState);
  if (sharded()) {
    sharded_optimizer_ = optim::make_sharded_optimizer(options_.optimizer, shards_, allocator);
    sharded_optimizer_->run_on(options_.context);  // the run's stream (B1)
  }
  return allocator.stats().current_of(MemoryCategory::kOptimizerState) - state_before;
}

void DataParallel::make_parameter_shards(const std::map<int, pipeline::StageModule*>& stages) {
  std::vector<ParameterUnit> parameter_units;
  for (int b = 0; b < bucketer_->num_buckets(); ++b) {
    const auto& bucket = bucketer_->bucket(b);
    parameter_units.push_back({bucketer_.get(), b,
                               std::vector<ParamPtr>(order_.begin() + bucket.first_grad, order_.begin() + bucket.end_grad)});
  }
  if (table_bucketer_) parameter_units.push_back({table_bucketer_.get(), 0, table_order()});
  for (int b = 0; expert_bucketer_ && b < expert_bucketer_->num_buckets(); ++b) {  // gathered over expert-dp
    const auto& bucket = expert_bucketer_->bucket(b);
    parameter_units.push_back({expert_bucketer_.get(), b,
                               std::vector<ParamPtr>(expert_order_.begin() + bucket.first_grad,
                                                     expert_order_.begin() + bucket.end_grad),
                               options_.expert_replicas});
  }
  std::vector<pipeline::StageModule*> modules;
  for (const auto& [stage, module] : stages) modules.push_back(module);
  parameter_shards_ = std::make_unique<ParameterShards>(std::move(parameter_units), modules, dp_, options_.context);
  for (std::size_t s = 0; s < shards_.size(); ++s) shards_[s].value = parameter_shards_->master(static_cast<int>(s));
}

void DataParallel::connect_stages(const std::map<int, pipeline::StageModule*>& stages, bool per_microbatch) {
  for (const auto& [stage, module] : stages) {
    if (per_microbatch) {
      module->set_grad_pass_callbacks([this](const layers::Param& p) { on_grad_begin(p); },
                                      [this](const layers::Param& p) { on_grad_done(p); });
      module->set_grad_final_callback([this](const layers::Param& p) {
        // The split table and the experts are reduced once per step.
        if (&p == split_table_.get() || p.ep_size > 1) on_grad_final(p);
      });
    } else {
      module->set_grad_final_callback([this](const layers::Param& p) { on_grad_final(p); });
    }
    stages_.push_back(module);
  }
}

// The layout on dp rank 0's log: ZeRO's reduction mode, the expert-dp group, the buckets and the optimizer state
// against what an unsharded optimizer would hold.
void DataParallel::log_layout(std::int64_t elements, std::int64_t state_bytes, bool per_microbatch) const {
  const int kinds = options_.optimizer.state_tensors_per_param();
  if (dp_.rank() == 0 && options_.zero_stage >= 2) {
    log::info("data parallel: ZeRO-{} gradients reduce-scattered {}", options_.zero_stage,
              per_microbatch ? "per micro-batch (optimizer.zero_reduce per_microbatch: this rank keeps its shards and "
                               "at most two buckets)"
                             : "once per step (optimizer.zero_reduce per_step: the full local gradient is held "
                               "through the backward)");
  }
  if (dp_.rank() == 0 && expert_bucketer_) {
    log::info("data parallel: expert parallelism: {} in {} reduced{} over the expert-dp group of {} (dp x cp / ep), "
              "the rest over dp x cp = {}",
              count_of(static_cast<std::int64_t>(expert_order_.size()), "expert tensor"),
              count_of(static_cast<std::int64_t>(expert_bucketer_->num_buckets()), "bucket"),
              options_.zero_stage >= 1 ? fmt::format(" and ZeRO-{} sharded", options_.zero_stage) : std::string(),
              count_of(static_cast<std::int64_t>(options_.expert_replicas->size()), "rank"), dp_.size());
  }
  if (dp_.rank() == 0) {
    const std::string buckets = count_of(static_cast<std::int64_t>(num_buckets() + (table_bucketer_ ? 1 : 0)), "bucket");
    if (parameter_shards_) {
      std::int64_t kept = 0;
      for (int u = 0; u < parameter_shards_->num_units(); ++u) kept += parameter_shards_->master(u).numel();
      log::info("data parallel: dp {}, {}, one per block | ZeRO-3: this rank keeps {} of {} parameter "
                "elements (each block's gathered while it runs, the next one's prefetched); optimizer state {} B "
                "(allocator kOptimizerState), unsharded {} B",
                dp_.size(), buckets, kept, elements, state_bytes,
                elements * kinds * 4);
    } else if (sharded()) {
      log::info("data parallel: dp {}, {} of <= {} MiB, {} parameter elements on this rank | ZeRO-{} "
                "optimizer state {} B (allocator kOptimizerState), unsharded {} B",
                dp_.size(), buckets, options_.bucket_mib, elements,
                options_.zero_stage, state_bytes, elements * kinds * 4);
    } else {
      log::info("data parallel: dp {}, {} of <= {} MiB, {} parameter elements on this rank | optimizer "
                "state unsharded {} B",
                dp_.size(), buckets, options_.bucket_mib, elements,
                elements * kinds * 4);
    }
  }
}

DataParallel::~DataParallel() {
  for (pipeline::StageModule* stage : stages_) {
    stage->set_grad_final_callback({});
    stage->set_grad_pass_callbacks({}, {});
  }
}

std::vector<std::string> DataParallel::ready_order() const {
  std::vector<std::string> names;
  for (const auto& p : order_) names.push_back(p->name);
  if (split_table_) names.push_back(split_table_->name);
  for (const auto& p : expert_order_) names.push_back(p->name);
  return names;
}

int DataParallel::num_buckets() const { return bucketer_->num_buckets(); }

}  // namespace cleave::train
