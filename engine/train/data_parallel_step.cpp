// DataParallel's per-step reduction (data_parallel.hpp): begin_step zeroes the gradients, the stages' callbacks
// mark each parameter ready (per step, or per micro-batch under ZeRO-2/3's per_microbatch) and a bucket starts
// once all of its gradients are in and every earlier bucket has started; end_step sums the split tied table over
// its group, then finishes every bucket. Invariant: every parameter is reported exactly as often as the ready
// order expects (end_step checks it), so the buckets start in the same order on every replica.
#include "engine/train/data_parallel.hpp"

#include "engine/core/error.hpp"

namespace cleave::train {

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

}  // namespace cleave::train
