// DataParallel's ZeRO side (data_parallel.hpp): the flat parameter buffers laid out like the gradient buckets
// (ZeRO-1/2), this rank's shard of every bucket, the gradient norm and clipping over the shards, and the sharded
// optimizer step with the all-gather (or, ZeRO-3, the parameter store's refresh) after it. Invariant: shard b of a
// bucket of n elements is [r·s, (r+1)·s) ∩ [0, n) with s = ceil(n / dp) in every mode, so plain data parallel and
// ZeRO compute the same norm bit for bit.
#include "engine/train/data_parallel.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {
namespace {

using ParamPtr = std::shared_ptr<layers::Param>;

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

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

kernels::ExactSquareSum DataParallel::local_grad_sum_of_squares(const optim::ParamFilter& counted) const {
  return optim::shard_grad_sum_of_squares(shards_, counted, options_.context, grad_list_);
}

double DataParallel::clip(double max_norm, double norm) {
  if (sharded()) return optim::clip_shard_grads(shards_, max_norm, norm, options_.context, grad_list_);
  return optim::clip_unique_grads(clip_params_, max_norm, norm, options_.context, grad_list_);
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
  std::vector<Tensor>& grads = grad_list_;  // the kept list: no allocation per step
  grads.clear();
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
  grads.clear();
}

}  // namespace cleave::train
