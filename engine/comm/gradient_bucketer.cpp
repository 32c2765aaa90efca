// Gradient buckets for data parallelism (gradient_bucketer.hpp): construction, views, and the per-step reduction
// (mark_ready, poll, launch, finish). The per-micro-batch reduction is in gradient_bucketer_microbatch.cpp, the
// bucket layout in gradient_bucket_layout.cpp, the ops on the buffers in gradient_bucket_ops.cpp.
//
// Invariant: buckets launch in bucket order (per step) on every rank, so the collectives match even when ranks mark
// gradients in different orders.
#include "engine/comm/gradient_bucketer.hpp"

#include <algorithm>
#include <cmath>

#include "engine/comm/gradient_bucket_ops.hpp"
#include "engine/comm/host_reduce.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::comm {

using detail::bucket_ops_context;
using detail::convert;
using detail::scale;

GradientBucketer::GradientBucketer(std::vector<GradientSpec> grads, Communicator& dp, const BucketerOptions& options,
                                   Allocator& allocator, const Stream& stream)
    : specs_(std::move(grads)), dp_(dp), options_(options), stream_(stream) {
  allocator_ = &allocator;
  CLEAVE_CHECK(options.bucket_mib > 0 && std::isfinite(options.bucket_mib),
               "gradient bucketer: bucket size {} MiB must be positive (parallel.dp_bucket_mb)", options.bucket_mib);
  CLEAVE_CHECK(allocator.device() == stream.device(), "gradient bucketer: buffers on {} but the stream is on {}",
               allocator.device().str(), stream.device().str());
  for (const GradientSpec& g : specs_) {
    CLEAVE_CHECK(allocator.device().is_cpu() || g.dtype != DType::kF16,
                 "gradient bucketer: gradient '{}' is f16, which buckets on {} cannot hold (no f16 ops on a device); "
                 "use f32 or bf16 gradients",
                 g.name, allocator.device().str());
  }
  BucketLayout layout = lay_out_buckets(specs_, options.bucket_mib, options.pack_units, sharded() ? dp.size() : 1);
  slots_ = std::move(layout.slots);
  buckets_ = std::move(layout.buckets);
  for (const Bucket& b : buckets_) {
    // Per micro-batch: a bucket's buffer exists only while a micro-batch writes it (ensure_buffer).
    buffers_.push_back(options.per_microbatch ? Tensor()
                                              : Tensor::zeros({b.numel}, b.dtype, MemoryCategory::kGradients, allocator));
    if (owns_shards()) owned_.emplace_back();  // allocated by the bucket's first reduction
    unready_in_bucket_.push_back(b.end_grad - b.first_grad);
  }
  const auto differs = [&](const Bucket& b) { return options.wire_dtype && b.dtype != *options.wire_dtype; };
  if (std::any_of(buckets_.begin(), buckets_.end(), differs)) {
    const DType wire = *options.wire_dtype;
    CLEAVE_CHECK(is_floating(wire), "gradient bucketer: wire dtype {} is not a floating type", dtype_name(wire));
    for (const Bucket& b : buckets_) {
      CLEAVE_CHECK(b.dtype == DType::kF32, "gradient bucketer: a {} wire needs f32 gradients, got {}",
                   dtype_name(wire), dtype_name(b.dtype));
      // ZeRO-2 allocates each staging buffer when its bucket launches and releases it in finish().
      staging_.push_back(owns_shards() ? Tensor()
                                       : Tensor::zeros({b.numel}, wire, MemoryCategory::kCommunication, allocator));
    }
    staged_ = true;
  }
  ready_.assign(specs_.size(), 0);
  works_.resize(buckets_.size());
  CLEAVE_CHECK(!options.per_microbatch || owns_shards(),
               "gradient bucketer: per-micro-batch reduction needs kReduceScatterOwned (ZeRO-2 or 3)");
  launches_.assign(buckets_.size(), 0);
  reports_.assign(specs_.size(), 0);
}

GradientBucketer::~GradientBucketer() {
  for (WorkPtr& w : works_) w.reset();  // each Work's destructor waits (with the watchdog)
}

const GradientSpec& GradientBucketer::spec(int index) const {
  CLEAVE_CHECK(index >= 0 && index < num_grads(), "gradient bucketer: gradient {} is not in 0..{}", index,
               num_grads() - 1);
  return specs_[static_cast<std::size_t>(index)];
}

const GradientBucketer::Slot& GradientBucketer::slot(int index) const {
  spec(index);
  return slots_[static_cast<std::size_t>(index)];
}

const GradientBucketer::Bucket& GradientBucketer::bucket(int b) const {
  CLEAVE_CHECK(b >= 0 && b < num_buckets(), "gradient bucketer: bucket {} is not in 0..{}", b, num_buckets() - 1);
  return buckets_[static_cast<std::size_t>(b)];
}

Tensor GradientBucketer::grad(int index) const {
  const Slot& s = slot(index);
  const Tensor& buffer = buffers_[static_cast<std::size_t>(s.bucket)];
  if (!buffer.defined()) return Tensor();
  return buffer.slice(s.offset, s.offset + s.numel).view(spec(index).shape);
}

Tensor GradientBucketer::bucket_buffer(int b) const {
  bucket(b);
  return buffers_[static_cast<std::size_t>(b)];
}

std::int64_t GradientBucketer::shard_begin(int b) const {
  CLEAVE_CHECK(sharded(), "gradient bucketer: shards exist only with a reduce-scatter reduction (ZeRO-1 or 2)");
  return bucket(b).numel / dp_.size() * dp_.rank();
}

Tensor GradientBucketer::shard(int b) const {
  if (owns_shards()) {
    shard_begin(b);
    return owned_[static_cast<std::size_t>(b)];
  }
  return block(buffers_[static_cast<std::size_t>(b)], b);
}

void GradientBucketer::zero_grads() {
  CLEAVE_CHECK(next_launch_ == 0, "gradient bucketer: zero_grads() while {} bucket(s) are in flight; call finish() "
               "first", next_launch_);
  if (per_microbatch()) {
    CLEAVE_CHECK(in_flight_.empty(), "gradient bucketer: zero_grads() while {} bucket(s) are in flight; call "
                 "finish() first", in_flight_.size());
    for (int b = 0; b < num_buckets(); ++b) owned_shard(b).zero_();  // the step's accumulators
    for (Tensor& buffer : buffers_) buffer = Tensor();  // an unfinished step's contributions are dropped
    std::fill(launches_.begin(), launches_.end(), 0);
    std::fill(reports_.begin(), reports_.end(), 0);
    for (int b = 0; b < num_buckets(); ++b) unready_in_bucket_[static_cast<std::size_t>(b)] = unreported(b);
    step_wire_bytes_ = 0;
    return;
  }
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b].defined()) buffers_[b].zero_();
    else buffers_[b] = Tensor::zeros({buckets_[b].numel}, buckets_[b].dtype, MemoryCategory::kGradients, *allocator_);
  }
}

Tensor GradientBucketer::block(const Tensor& whole, int b) const {
  const std::int64_t begin = shard_begin(b);
  return whole.slice(begin, begin + bucket(b).numel / dp_.size());
}

Tensor& GradientBucketer::owned_shard(int b) {
  Tensor& t = owned_[static_cast<std::size_t>(b)];
  if (!t.defined()) t = Tensor::empty({bucket(b).numel / dp_.size()}, bucket(b).dtype, MemoryCategory::kGradients, *allocator_);
  return t;
}

void GradientBucketer::complete(int b) {
  ops::copy(bucket_ops_context(*allocator_, stream_), block(buffers_[static_cast<std::size_t>(b)], b), owned_shard(b));
  release(b);
}

void GradientBucketer::release_shards() {
  CLEAVE_CHECK(next_launch_ == 0, "gradient bucketer: release_shards() while {} bucket(s) are in flight", next_launch_);
  for (Tensor& t : owned_) t = Tensor();
}

void GradientBucketer::release(int b) {
  buffers_[static_cast<std::size_t>(b)] = Tensor();
  if (options_.on_release) options_.on_release(b);
}

void GradientBucketer::mark_ready(int index) {
  spec(index);
  if (per_microbatch()) return mark_ready_microbatch(index);
  auto& flag = ready_[static_cast<std::size_t>(index)];
  CLEAVE_CHECK(!flag, "gradient bucketer: gradient {} ('{}') marked ready twice in one step", index,
               specs_[static_cast<std::size_t>(index)].name);
  flag = 1;
  const int b = slots_[static_cast<std::size_t>(index)].bucket;
  CLEAVE_CHECK(b >= next_launch_, "gradient bucketer: gradient {} ('{}') marked ready after its bucket {} was launched",
               index, specs_[static_cast<std::size_t>(index)].name, b);
  --unready_in_bucket_[static_cast<std::size_t>(b)];
  const int before = next_launch_;
  launch_ready_buckets();
  launched_early_ += next_launch_ - before;
  poll();
}

void GradientBucketer::poll() {
  if (per_microbatch()) {  // progress only: a bucket is completed at the next launch or in finish()
    for (InFlight& f : in_flight_) f.work->test();
    return;
  }
  bool earlier_in_flight = false;
  for (int b = 0; b < next_launch_; ++b) {
    WorkPtr& work = works_[static_cast<std::size_t>(b)];
    if (!work) continue;  // ZeRO-2: traded already
    const bool done = work->test();
    earlier_in_flight = earlier_in_flight || !done;
    // ZeRO-2: a reduced bucket's shard moves to a buffer of its own and the full buffer is released (a staged
    // bucket's f32 buffer was released at launch; finish() widens the wire copy's block), in bucket order only: a
    // bucket whose collective finished before an earlier one's waits for it, so the step's gradient peak is a
    // function of the layout, not of which collective finished first (the memory plan counts it:
    // engine/run_plan/flat_buckets.hpp, FlatBuckets::trade_excess).
    if (!done || !owns_shards() || earlier_in_flight) continue;
    work.reset();
    if (!staged_) complete(b);
  }
}

void GradientBucketer::launch_ready_buckets() {
  while (next_launch_ < num_buckets() && unready_in_bucket_[static_cast<std::size_t>(next_launch_)] == 0) {
    launch(next_launch_++);
  }
}

void GradientBucketer::launch(int b) {
  Tensor buffer = buffers_[static_cast<std::size_t>(b)];
  // Sharded: in place into this rank's block (ZeRO-2 copies it out when the collective completes).
  Tensor out = options_.reduction == BucketReduction::kAllReduce ? buffer : block(buffer, b);
  if (staged_) {  // round the bucket into the wire dtype and reduce that
    Tensor& wire = staging_[static_cast<std::size_t>(b)];
    if (!wire.defined()) wire = Tensor::empty({buffer.numel()}, *options_.wire_dtype, MemoryCategory::kCommunication, *allocator_);
    convert(bucket_ops_context(*allocator_, stream_), buffer, wire);
    buffer = wire;
    const std::int64_t begin = options_.reduction == BucketReduction::kAllReduce ? 0 : shard_begin(b);
    out = wire.slice(begin, begin + out.numel());
    if (owns_shards()) release(b);  // ZeRO-2: the wire copy is all the collective needs
  }
  works_[static_cast<std::size_t>(b)] = options_.reduction == BucketReduction::kAllReduce
                                            ? dp_.all_reduce(buffer, ReduceOp::kSum, stream_)
                                            : dp_.reduce_scatter(buffer, out, ReduceOp::kSum, stream_);
  if (options_.after_launch) options_.after_launch(b);
}

std::int64_t GradientBucketer::wire_bytes_per_step() const {
  if (per_microbatch()) return last_wire_bytes_;
  std::int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    bytes += b.numel * static_cast<std::int64_t>(dtype_size(options_.wire_dtype.value_or(b.dtype)));
  }
  return bytes;
}

int GradientBucketer::finish() {
  if (per_microbatch()) return finish_microbatch();
  const ops::Context ctx = bucket_ops_context(*allocator_, stream_);
  while (next_launch_ < num_buckets()) launch(next_launch_++);
  for (int b = 0; b < num_buckets(); ++b) {
    WorkPtr& work = works_[static_cast<std::size_t>(b)];
    if (work) work->wait();  // ZeRO-2: poll() may have completed and dropped it already
    work.reset();
    if (owns_shards() && !staged_ && buffers_[static_cast<std::size_t>(b)].defined()) complete(b);
    const Tensor target = options_.reduction == BucketReduction::kAllReduce ? buffers_[static_cast<std::size_t>(b)]
                          : owns_shards()                                   ? owned_shard(b)
                                                                            : shard(b);
    if (staged_) {  // widen the reduced wire values back into the gradients
      Tensor& wire = staging_[static_cast<std::size_t>(b)];
      const std::int64_t begin = options_.reduction == BucketReduction::kAllReduce ? 0 : shard_begin(b);
      convert(ctx, wire.slice(begin, begin + target.numel()), target);
      if (owns_shards()) wire = Tensor();
    }
    if (options_.scale != 1.0f) scale(ctx, target, options_.scale);
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  for (int b = 0; b < num_buckets(); ++b) {
    const Bucket& bk = buckets_[static_cast<std::size_t>(b)];
    unready_in_bucket_[static_cast<std::size_t>(b)] = bk.end_grad - bk.first_grad;
  }
  next_launch_ = 0;
  const int early = launched_early_;
  launched_early_ = 0;
  return early;
}

}  // namespace cleave::comm
