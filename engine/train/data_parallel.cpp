// Data-parallel gradient reduction and ZeRO-1 (data_parallel.hpp): ready order, bucket views, callbacks,
// the tied table's sum before its reduction, shard bookkeeping and the parameter all-gather.
#include "engine/train/data_parallel.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "kernels/ops/ops.hpp"
#include "pipeline/action.hpp"

namespace cleave::train {
namespace {

using ParamPtr = std::shared_ptr<layers::Param>;

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

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

}  // namespace

DataParallel::DataParallel(const run_plan::Plan& plan, int pp_rank, const std::map<int, pipeline::StageModule*>& stages,
                           const optim::ParamList& params, comm::Communicator& dp, comm::Communicator* tied_group,
                           const DataParallelOptions& options)
    : options_(options), dp_(dp), tied_group_(tied_group) {
  CLEAVE_CHECK(options.zero_stage >= 0 && options.zero_stage <= 3, "optimizer.zero_stage must be 0 to 3, got {}",
               options.zero_stage);

  // How often each parameter is reported per step: once per local stage listing it, plus once more for a
  // tied table whose embedding and head sit in the same stage (the stage lists it once, both blocks report).
  std::unordered_map<const layers::Param*, int> reports;
  for (const auto& [stage, module] : stages) {
    for (const auto& p : module->params()) ++reports[p.get()];
  }
  const bool tied = !plan.spec.tied_parameters.empty();
  const std::string tied_name = tied ? plan.spec.tied_parameters.front() : std::string();
  const int embedding_stage = plan.stage_of_block(partition::BlockKind::kEmbedding);
  if (tied && embedding_stage >= 0 && embedding_stage == plan.stage_of_block(partition::BlockKind::kLmHead) &&
      stages.count(embedding_stage) != 0) {
    for (const auto& p : stages.at(embedding_stage)->params()) {
      if (p->name == tied_name) ++reports[p.get()];
    }
  }

  // Ready order: stages by their last W pass, each in reverse forward order; a shared parameter at its
  // last occurrence.
  // ZeRO-3 cuts buckets at blocks: a parameter's unit is its first block in the stage where it is reported last.
  std::vector<ParamPtr> sequence;
  std::unordered_map<const layers::Param*, int> unit_of;
  std::unordered_map<const layers::Param*, int> stage_of;  // where it is reported last
  int units = 0;
  for (int stage : stages_by_final_weight_pass(plan, pp_rank, stages)) {
    const pipeline::StageModule& module = *stages.at(stage);
    const auto& local = module.params();
    std::map<int, int> unit_of_block;
    for (auto it = local.rbegin(); it != local.rend(); ++it) {
      sequence.erase(std::remove(sequence.begin(), sequence.end(), *it), sequence.end());
      sequence.push_back(*it);
      const auto [unit, added] = unit_of_block.try_emplace(module.lowest_block_of(**it), units);
      units += added ? 1 : 0;
      unit_of[it->get()] = unit->second;
      stage_of[it->get()] = stage;
    }
  }
  CLEAVE_ASSERT(sequence.size() == optim::unique_params(params).size(),
                "data parallel: the stages list {} parameters, the trainer {}", sequence.size(),
                optim::unique_params(params).size());
  if (tied_group_ != nullptr) {
    CLEAVE_ASSERT(plan.tied_table_split(), "data parallel: a tied group without a split tied table");
    for (const auto& p : sequence) {
      if (p->name == tied_name) split_table_ = p;
    }
    CLEAVE_ASSERT(split_table_ != nullptr, "data parallel: a tied group but no parameter '{}' on this rank",
                  tied_name);
    CLEAVE_ASSERT(reports[split_table_.get()] == 1, "data parallel: the split tied table is reported {} times",
                  reports[split_table_.get()]);
  }
  for (const auto& p : sequence) {
    if (p == split_table_) continue;
    if (p->ep_size > 1) {
      CLEAVE_ASSERT(options.expert_replicas != nullptr,
                    "data parallel: expert-parallel parameter {} without an expert-dp group", p->name);
      expert_order_.push_back(p);
    } else {
      order_.push_back(p);
    }
  }

  comm::BucketerOptions bucket_options;
  bucket_options.bucket_mib = options.bucket_mib;
  bucket_options.scale = options.average ? 1.0f / static_cast<float>(dp.size()) : 1.0f;
  bucket_options.reduction = options.zero_stage >= 2   ? comm::BucketReduction::kReduceScatterOwned
                             : options.zero_stage == 1 ? comm::BucketReduction::kReduceScatter
                                                       : comm::BucketReduction::kAllReduce;
  bucket_options.wire_dtype = options.grad_wire_dtype;
  const bool per_microbatch = options.per_microbatch && options.zero_stage >= 2;
  bucket_options.per_microbatch = per_microbatch;
  bucket_options.pack_units = per_microbatch && options.zero_stage == 2;
  bucket_options.after_launch = options.after_bucket_launch;
  // Collectives run on the run's stream, after the kernels that produced their inputs (B4 of docs/cuda.md).
  // ZeRO-2: a reduced bucket's full buffer goes back to the allocator; its parameters' grad views with it.
  bucket_options.on_release = [this](int b) {
    const auto& bucket = bucketer_->bucket(b);
    for (int i = bucket.first_grad; i < bucket.end_grad; ++i) order_[static_cast<std::size_t>(i)]->grad = Tensor();
  };
  std::vector<comm::GradientSpec> specs = specs_of(order_);
  if (options.zero_stage == 3) {
    for (std::size_t i = 0; i < specs.size(); ++i) specs[i].unit = unit_of.at(order_[i].get());
  } else if (per_microbatch) {  // whole blocks of one stage per bucket; a table several blocks write alone
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const layers::Param* p = order_[i].get();
      const bool shared = reports[p] > 1;
      specs[i].unit = shared ? units + static_cast<int>(i) : unit_of.at(p);
      specs[i].group = shared ? -2 - static_cast<int>(i) : stage_of.at(p);
    }
  }
  release_grads(order_);
  bucketer_ = std::make_unique<comm::GradientBucketer>(std::move(specs), dp, bucket_options,
                                                      *options.context.allocator, *options.context.stream);
  for (int i = 0; i < bucketer_->num_grads(); ++i) {
    layers::Param* p = order_[static_cast<std::size_t>(i)].get();
    p->grad = bucketer_->grad(i);
    entries_[p] = Entry{p, bucketer_.get(), i, reports[p], 0};
  }
  std::vector<ParamPtr> table_order;
  if (split_table_) {
    table_order.push_back(split_table_);
    bucket_options.on_release = [this](int) { split_table_->grad = Tensor(); };
    bucket_options.per_microbatch = false;  // summed over the tied group once per step, then reduced
    bucket_options.pack_units = false;
    std::vector<comm::GradientSpec> table_specs = specs_of(table_order);
    release_grads(table_order);
    table_bucketer_ = std::make_unique<comm::GradientBucketer>(std::move(table_specs), dp, bucket_options,
                                                             *options.context.allocator, *options.context.stream);
    split_table_->grad = table_bucketer_->grad(0);
    entries_[split_table_.get()] = Entry{split_table_.get(), table_bucketer_.get(), 0, 1, 0};
  }
  if (!expert_order_.empty()) {
    // ZeRO-2 and 3: the expert-dp group reduce-scatters into owned shards too (the grad views of a released bucket
    // dropped); once per step whatever optimizer.zero_reduce says (its buffers live through the backward). ZeRO-3
    // cuts its buckets at the same blocks as the main ones: a moe block's units are its non-expert parameters'
    // (over dp × cp) and its experts' (over expert-dp).
    bucket_options.on_release = [this](int b) {
      const auto& bucket = expert_bucketer_->bucket(b);
      for (int i = bucket.first_grad; i < bucket.end_grad; ++i) expert_order_[static_cast<std::size_t>(i)]->grad = Tensor();
    };
    bucket_options.per_microbatch = false;
    bucket_options.pack_units = false;
    bucket_options.after_launch = {};
    bucket_options.scale = options.average ? 1.0f / static_cast<float>(options.expert_replicas->size()) : 1.0f;
    std::vector<comm::GradientSpec> expert_specs = specs_of(expert_order_);
    if (options.zero_stage == 3) {
      for (std::size_t i = 0; i < expert_specs.size(); ++i) expert_specs[i].unit = unit_of.at(expert_order_[i].get());
    }
    release_grads(expert_order_);
    expert_bucketer_ = std::make_unique<comm::GradientBucketer>(std::move(expert_specs), *options.expert_replicas,
                                                              bucket_options, *options.context.allocator,
                                                              *options.context.stream);
    for (int i = 0; i < expert_bucketer_->num_grads(); ++i) {
      layers::Param* p = expert_order_[static_cast<std::size_t>(i)].get();
      p->grad = expert_bucketer_->grad(i);
      entries_[p] = Entry{p, expert_bucketer_.get(), i, reports[p], 0};
    }
  }
  for (int b = 0; b < bucketer_->num_buckets(); ++b) {
    const auto& bucket = bucketer_->bucket(b);
    unready_in_bucket_.push_back(bucket.end_grad - bucket.first_grad);
  }

  // What an unsharded optimizer holds: one f32 tensor per parameter per state kind.
  std::int64_t elements = 0;
  for (const auto& p : sequence) elements += p->value.numel();

  if (options.zero_stage == 1 || options.zero_stage == 2) {
    values_ = flatten_values(*bucketer_, order_);
    if (table_bucketer_) table_values_ = flatten_values(*table_bucketer_, table_order);
    if (expert_bucketer_) expert_values_ = flatten_values(*expert_bucketer_, expert_order_);
  }
  shards_ = make_shards(*bucketer_, order_, values_, dp_);
  if (table_bucketer_) {
    for (auto& shard : make_shards(*table_bucketer_, table_order, table_values_, dp_)) shards_.push_back(std::move(shard));
  }
  if (expert_bucketer_) {
    for (auto& shard : make_shards(*expert_bucketer_, expert_order_, expert_values_, *options.expert_replicas)) {
      shards_.push_back(std::move(shard));
    }
  }
  if (options.zero_stage == 3) {  // the shards' values are the store's masters; the Params keep no value
    std::vector<ParameterUnit> parameter_units;
    for (int b = 0; b < bucketer_->num_buckets(); ++b) {
      const auto& bucket = bucketer_->bucket(b);
      parameter_units.push_back({bucketer_.get(), b,
                                 std::vector<ParamPtr>(order_.begin() + bucket.first_grad, order_.begin() + bucket.end_grad)});
    }
    if (table_bucketer_) parameter_units.push_back({table_bucketer_.get(), 0, table_order});
    for (int b = 0; expert_bucketer_ && b < expert_bucketer_->num_buckets(); ++b) {  // gathered over expert-dp
      const auto& bucket = expert_bucketer_->bucket(b);
      parameter_units.push_back({expert_bucketer_.get(), b,
                                 std::vector<ParamPtr>(expert_order_.begin() + bucket.first_grad,
                                                       expert_order_.begin() + bucket.end_grad),
                                 options.expert_replicas});
    }
    std::vector<pipeline::StageModule*> modules;
    for (const auto& [stage, module] : stages) modules.push_back(module);
    parameter_shards_ = std::make_unique<ParameterShards>(std::move(parameter_units), modules, dp, options.context);
    for (std::size_t s = 0; s < shards_.size(); ++s) shards_[s].value = parameter_shards_->master(static_cast<int>(s));
  }
  Allocator& allocator = *options.context.allocator;
  const std::int64_t state_before = allocator.stats().current_of(MemoryCategory::kOptimizerState);
  if (sharded()) {
    sharded_optimizer_ = optim::make_sharded_optimizer(options.optimizer, shards_, allocator);
    sharded_optimizer_->run_on(options.context);  // the run's stream (B1)
  }
  const std::int64_t state_bytes = allocator.stats().current_of(MemoryCategory::kOptimizerState) - state_before;

  const int kinds = options.optimizer.state_tensors_per_param();
  if (dp.rank() == 0 && options.zero_stage >= 2) {
    log::info("data parallel: ZeRO-{} gradients reduce-scattered {}", options.zero_stage,
              per_microbatch ? "per micro-batch (optimizer.zero_reduce per_microbatch: this rank keeps its shards and "
                               "at most two buckets)"
                             : "once per step (optimizer.zero_reduce per_step: the full local gradient is held "
                               "through the backward)");
  }
  if (dp.rank() == 0 && expert_bucketer_) {
    log::info("data parallel: expert parallelism: {} expert tensor(s) in {} bucket(s) reduced{} over the expert-dp group "
              "of {} rank(s) (dp x cp / ep), the rest over dp x cp = {}",
              expert_order_.size(), expert_bucketer_->num_buckets(),
              options.zero_stage >= 1 ? fmt::format(" and ZeRO-{} sharded", options.zero_stage) : std::string(),
              options.expert_replicas->size(), dp.size());
  }
  if (dp.rank() == 0) {
    if (parameter_shards_) {
      std::int64_t kept = 0;
      for (int u = 0; u < parameter_shards_->num_units(); ++u) kept += parameter_shards_->master(u).numel();
      log::info("data parallel: dp {}, {} bucket(s), one per block | ZeRO-3: this rank keeps {} of {} parameter "
                "elements (each block's gathered while it runs, the next one's prefetched); optimizer state {} B "
                "(allocator kOptimizerState), unsharded {} B",
                dp.size(), num_buckets() + (table_bucketer_ ? 1 : 0), kept, elements, state_bytes,
                elements * kinds * 4);
    } else if (sharded()) {
      log::info("data parallel: dp {}, {} bucket(s) of <= {} MiB, {} parameter elements on this rank | ZeRO-{} "
                "optimizer state {} B (allocator kOptimizerState), unsharded {} B",
                dp.size(), num_buckets() + (table_bucketer_ ? 1 : 0), options.bucket_mib, elements,
                options.zero_stage, state_bytes, elements * kinds * 4);
    } else {
      log::info("data parallel: dp {}, {} bucket(s) of <= {} MiB, {} parameter elements on this rank | optimizer "
                "state unsharded {} B",
                dp.size(), num_buckets() + (table_bucketer_ ? 1 : 0), options.bucket_mib, elements,
                elements * kinds * 4);
    }
  }

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

DataParallel::~DataParallel() {
  for (pipeline::StageModule* stage : stages_) {
    stage->set_grad_final_callback({});
    stage->set_grad_pass_callbacks({}, {});
  }
}

std::vector<Tensor> DataParallel::flatten_values(const comm::GradientBucketer& bucketer,
                                                 const std::vector<ParamPtr>& order) const {
  std::vector<Tensor> values;
  for (int b = 0; b < bucketer.num_buckets(); ++b) {
    values.push_back(Tensor::zeros({bucketer.bucket(b).numel}, DType::kF32, MemoryCategory::kParameters,
                                  *options_.context.allocator));
  }
  for (int i = 0; i < bucketer.num_grads(); ++i) {
    layers::Param& p = *order[static_cast<std::size_t>(i)];
    CLEAVE_CHECK(p.value.dtype() == DType::kF32, "optimizer.zero_stage {}: parameter {} is {}; ZeRO keeps f32 values",
                 options_.zero_stage, p.name, dtype_name(p.value.dtype()));
    const auto& slot = bucketer.slot(i);
    Tensor view = values[static_cast<std::size_t>(slot.bucket)].slice(slot.offset, slot.offset + slot.numel)
                      .view(p.value.shape());
    ops::copy(options_.context, p.value, view);  // on the run's stream: the values may be on a GPU
    p.value = view;
  }
  return values;
}

std::vector<optim::FlatShard> DataParallel::make_shards(const comm::GradientBucketer& bucketer,
                                                        const std::vector<ParamPtr>& order,
                                                        const std::vector<Tensor>& values,
                                                        const comm::Communicator& group) const {
  // Shard b of a bucket of n elements: [r·s, (r+1)·s) ∩ [0, n) with s = ceil(n / dp), the bucketer's
  // ZeRO-1 shards (which pad n to a multiple of dp) whichever the mode.
  std::vector<optim::FlatShard> shards;
  const int dp_size = group.size();
  for (int b = 0; b < bucketer.num_buckets(); ++b) {
    const auto& bucket = bucketer.bucket(b);
    const std::int64_t length = round_up(bucket.numel, dp_size) / dp_size;
    const std::int64_t begin = std::min(bucket.numel, length * group.rank());
    const std::int64_t end = std::min(bucket.numel, begin + length);
    if (sharded()) CLEAVE_ASSERT(begin == bucketer.shard_begin(b) && end - begin == bucket.numel / dp_size,
                               "data parallel: shard {} of bucket {} differs from the bucketer's", group.rank(), b);
    optim::FlatShard shard;
    // ZeRO-2's shard is a buffer of its own (the bucket buffer is released after each reduction).
    shard.grad = bucketer.sharded() ? bucketer.shard(b) : bucketer.bucket_buffer(b).slice(begin, end);
    if (!values.empty()) shard.value = values[static_cast<std::size_t>(b)].slice(begin, end);
    for (int i = bucket.first_grad; i < bucket.end_grad; ++i) {
      const auto& slot = bucketer.slot(i);
      const std::int64_t lo = std::max(begin, slot.offset);
      const std::int64_t hi = std::min(end, slot.offset + slot.numel);
      if (lo >= hi) continue;
      shard.segments.push_back({lo - begin, hi - lo, lo - slot.offset, order[static_cast<std::size_t>(i)].get()});
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

void DataParallel::begin_step() {
  CLEAVE_ASSERT(!tied_work_, "data parallel: begin_step() with the tied sum of the previous step in flight");
  bucketer_->zero_grads();
  if (table_bucketer_) table_bucketer_->zero_grads();
  if (expert_bucketer_) expert_bucketer_->zero_grads();
  if (options_.zero_stage >= 2) {  // the buffers released by the last step's reduction are new: view them again
    for (int i = 0; i < bucketer_->num_grads(); ++i) order_[static_cast<std::size_t>(i)]->grad = bucketer_->grad(i);
    if (table_bucketer_) split_table_->grad = table_bucketer_->grad(0);
    for (int i = 0; expert_bucketer_ && i < expert_bucketer_->num_grads(); ++i) {
      expert_order_[static_cast<std::size_t>(i)]->grad = expert_bucketer_->grad(i);
    }
  }
  for (auto& [param, entry] : entries_) entry.reports = 0;
  for (int b = 0; b < bucketer_->num_buckets(); ++b) {
    const auto& bucket = bucketer_->bucket(b);
    unready_in_bucket_[static_cast<std::size_t>(b)] = bucket.end_grad - bucket.first_grad;
  }
  launched_ = 0;
  launched_at_last_report_ = 0;
}

void DataParallel::on_grad_final(const layers::Param& param) {
  auto it = entries_.find(&param);
  CLEAVE_ASSERT(it != entries_.end(), "data parallel: parameter {} reported final but not bucketed", param.name);
  Entry& e = it->second;
  ++e.reports;
  CLEAVE_ASSERT(e.reports <= e.expected_reports, "data parallel: parameter {} reported final {} times (expected {})",
                param.name, e.reports, e.expected_reports);
  launched_at_last_report_ = launched_;
  if (tied_work_) tied_work_->test();  // progress the tied sum
  if (e.reports < e.expected_reports) return;
  if (e.param == split_table_.get()) {
    // Both copies' gradients are summed before either is reduced over dp (end_step launches that).
    tied_work_ = tied_group_->all_reduce(split_table_->grad, comm::ReduceOp::kSum, *options_.context.stream);
    return;
  }
  e.bucketer->mark_ready(e.index);
  if (e.bucketer != bucketer_.get()) return;  // the expert bucketer launches its own buckets
  const int b = bucketer_->slot(e.index).bucket;
  --unready_in_bucket_[static_cast<std::size_t>(b)];
  while (launched_ < bucketer_->num_buckets() && unready_in_bucket_[static_cast<std::size_t>(launched_)] == 0) {
    ++launched_;
  }
}

void DataParallel::on_grad_begin(const layers::Param& param) {
  if (&param == split_table_.get()) return;  // its buffer lives through the step
  auto it = entries_.find(&param);
  CLEAVE_ASSERT(it != entries_.end(), "data parallel: parameter {} about to be written but not bucketed", param.name);
  if (it->second.bucketer != bucketer_.get()) return;  // an expert: its buffer lives through the step
  const int b = bucketer_->slot(it->second.index).bucket;
  if (!bucketer_->ensure_buffer(b)) return;
  const auto& bucket = bucketer_->bucket(b);
  for (int i = bucket.first_grad; i < bucket.end_grad; ++i) order_[static_cast<std::size_t>(i)]->grad = bucketer_->grad(i);
}

void DataParallel::on_grad_done(const layers::Param& param) {
  if (&param == split_table_.get()) return;  // on_grad_final, once per step
  auto it = entries_.find(&param);
  CLEAVE_ASSERT(it != entries_.end(), "data parallel: parameter {} reported done but not bucketed", param.name);
  Entry& e = it->second;
  if (e.bucketer != bucketer_.get()) return;  // an expert: on_grad_final, once per step
  if (tied_work_) tied_work_->test();  // progress the tied sum
  if (++e.reports % e.expected_reports == 0) bucketer_->mark_ready(e.index);
}

DataParallelStepReport DataParallel::end_step() {
  const bool per_microbatch = bucketer_->per_microbatch();
  for (const auto& [param, entry] : entries_) {
    const bool per_pass = per_microbatch && entry.bucketer == bucketer_.get();
    CLEAVE_ASSERT(per_pass ? entry.reports > 0 && entry.reports % entry.expected_reports == 0
                           : entry.reports == entry.expected_reports,
                  "data parallel: parameter {} was reported final {} times this step, expected {} (grad-final "
                  "callbacks and the derived ready order disagree)",
                  entry.param->name, entry.reports, entry.expected_reports);
  }
  DataParallelStepReport report;
  report.buckets = bucketer_->num_buckets();
  report.launched_before_last_report = launched_at_last_report_;
  // Every main bucket has started (all gradients were reported); the table's goes after them on every rank.
  if (table_bucketer_) {
    CLEAVE_ASSERT(tied_work_ != nullptr, "data parallel: the split tied table was never summed");
    tied_work_->wait();
    tied_work_.reset();
    table_bucketer_->mark_ready(0);
  }
  report.launched_before_finish = bucketer_->finish();
  if (table_bucketer_) table_bucketer_->finish();
  if (expert_bucketer_) expert_bucketer_->finish();
  if (options_.zero_stage >= 2) adopt_shard_grads();
  if (parameter_shards_) parameter_shards_->release_unused();
  report.wire_bytes = bucketer_->wire_bytes_per_step() + (table_bucketer_ ? table_bucketer_->wire_bytes_per_step() : 0) +
                      (expert_bucketer_ ? expert_bucketer_->wire_bytes_per_step() : 0);
  return report;
}

kernels::ExactSquareSum DataParallel::local_grad_sum_of_squares(const optim::ParamFilter& counted) const {
  return optim::shard_grad_sum_of_squares(shards_, counted, options_.context);
}

double DataParallel::clip(double max_norm, double norm) {
  if (sharded()) return optim::clip_shard_grads(shards_, max_norm, norm, options_.context);
  optim::ParamList all(order_.begin(), order_.end());
  if (split_table_) all.push_back(split_table_);
  all.insert(all.end(), expert_order_.begin(), expert_order_.end());
  return optim::clip_grads(all, max_norm, norm, options_.context);
}

void DataParallel::all_gather_values(const comm::GradientBucketer& bucketer, const std::vector<Tensor>& values,
                                     std::vector<comm::WorkPtr>& works, comm::Communicator& group) const {
  for (int b = 0; b < bucketer.num_buckets(); ++b) {
    const Tensor& flat = values[static_cast<std::size_t>(b)];
    const std::int64_t begin = bucketer.shard_begin(b);
    works.push_back(group.all_gather(flat.slice(begin, begin + bucketer.bucket(b).numel / group.size()), flat,
                                     *options_.context.stream));
  }
}

void DataParallel::sharded_step(double lr) {
  CLEAVE_ASSERT(sharded(), "data parallel: sharded_step() without optimizer.zero_stage 1, 2 or 3");
  sharded_optimizer_->step(lr);
  if (parameter_shards_) {
    parameter_shards_->refresh_working();  // the next forward gathers the updated shards
  } else {
    std::vector<comm::WorkPtr> works;
    all_gather_values(*bucketer_, values_, works, dp_);
    if (table_bucketer_) all_gather_values(*table_bucketer_, table_values_, works, dp_);
    if (expert_bucketer_) all_gather_values(*expert_bucketer_, expert_values_, works, *options_.expert_replicas);
    for (auto& w : works) w->wait();
  }
  if (options_.zero_stage >= 2) {  // the update has used the gradient shards: none is held until the next reduction
    bucketer_->release_shards();
    if (table_bucketer_) table_bucketer_->release_shards();
    if (expert_bucketer_) expert_bucketer_->release_shards();
    adopt_shard_grads();
  }
}

void DataParallel::adopt_shard_grads() {
  std::vector<Tensor> grads;
  for (int b = 0; b < bucketer_->num_buckets(); ++b) grads.push_back(bucketer_->shard(b));
  if (table_bucketer_) {
    for (int b = 0; b < table_bucketer_->num_buckets(); ++b) grads.push_back(table_bucketer_->shard(b));
  }
  if (expert_bucketer_) {
    for (int b = 0; b < expert_bucketer_->num_buckets(); ++b) grads.push_back(expert_bucketer_->shard(b));
  }
  CLEAVE_ASSERT(grads.size() == shards_.size(), "data parallel: {} shard grads for {} shards", grads.size(),
                shards_.size());
  for (std::size_t s = 0; s < shards_.size(); ++s) shards_[s].grad = grads[s];
  sharded_optimizer_->set_shard_grads(grads);
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
