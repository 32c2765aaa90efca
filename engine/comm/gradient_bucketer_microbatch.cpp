// The gradient bucketer's per-micro-batch reduction (gradient_bucketer.hpp, "Per micro-batch"; ZeRO-2/3 with
// optimizer.zero_reduce per_microbatch): buffers allocated while a micro-batch writes them, a bucket reduce-scattered
// once every gradient in it has that micro-batch's contributions, and its reduced block added into the step's shard
// accumulator when the next bucket launches.
//
// Invariant: at most one bucket is in flight besides the one being filled (each launch first settles the previous
// one); the memory plan relies on this fixed rule, not on when a collective happens to finish.
#include <algorithm>

#include "engine/comm/gradient_bucket_ops.hpp"
#include "engine/comm/gradient_bucketer.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::comm {

using detail::bucket_ops_context;
using detail::convert;
using detail::scale;

bool GradientBucketer::ensure_buffer(int b) {
  CLEAVE_ASSERT(per_microbatch(), "gradient bucketer: ensure_buffer() without per-micro-batch reduction");
  const Bucket& bk = bucket(b);
  Tensor& buffer = buffers_[static_cast<std::size_t>(b)];
  if (buffer.defined()) return false;
  buffer = Tensor::zeros({bk.numel}, bk.dtype, MemoryCategory::kGradients, *allocator_);
  return true;
}

int GradientBucketer::unreported(int b) const {
  const Bucket& bk = buckets_[static_cast<std::size_t>(b)];
  int count = 0;
  for (int i = bk.first_grad; i < bk.end_grad; ++i) {
    count += reports_[static_cast<std::size_t>(i)] <= launches_[static_cast<std::size_t>(b)] ? 1 : 0;
  }
  return count;
}

void GradientBucketer::settle() {
  const ops::Context ctx = bucket_ops_context(*allocator_, stream_);
  for (InFlight& f : in_flight_) {
    f.work->wait();
    f.work.reset();
    const Tensor reduced = block(f.sent, f.bucket);
    Tensor& shard = owned_shard(f.bucket);
    if (reduced.dtype() == shard.dtype()) {
      ops::add_inplace(ctx, shard, reduced);
    } else {  // a wire copy: widen, then add
      const Tensor widened = Tensor::empty({shard.numel()}, shard.dtype(), MemoryCategory::kGradients, *allocator_);
      convert(ctx, reduced, widened);
      ops::add_inplace(ctx, shard, widened);
    }
  }
  in_flight_.clear();  // frees the buffers
}

void GradientBucketer::launch_microbatch(int b) {
  settle();  // at most one bucket in flight besides the one being filled (the memory plan's rule)
  Tensor buffer = buffers_[static_cast<std::size_t>(b)];
  ++launches_[static_cast<std::size_t>(b)];
  if (buffer.defined()) {  // undefined: every contribution went out with the previous launch (ranks agree)
    Tensor sent = buffer;
    if (staged_) {
      sent = Tensor::empty({buffer.numel()}, *options_.wire_dtype, MemoryCategory::kCommunication, *allocator_);
      convert(bucket_ops_context(*allocator_, stream_), buffer, sent);
    }
    release(b);  // the owner drops its views; `sent` (or `buffer` until here) keeps what is reduced alive
    buffer = Tensor();
    WorkPtr work = dp_.reduce_scatter(sent, block(sent, b), ReduceOp::kSum, stream_);
    step_wire_bytes_ += sent.numel() * static_cast<std::int64_t>(dtype_size(sent.dtype()));
    in_flight_.push_back(InFlight{b, std::move(sent), std::move(work)});
    if (options_.after_launch) options_.after_launch(b);
  }
  unready_in_bucket_[static_cast<std::size_t>(b)] = unreported(b);
}

void GradientBucketer::mark_ready_microbatch(int index) {
  const int b = slots_[static_cast<std::size_t>(index)].bucket;
  int& reports = reports_[static_cast<std::size_t>(index)];
  if (reports++ == launches_[static_cast<std::size_t>(b)] && --unready_in_bucket_[static_cast<std::size_t>(b)] == 0) {
    launch_microbatch(b);
  }
  poll();
}

int GradientBucketer::finish_microbatch() {
  const ops::Context ctx = bucket_ops_context(*allocator_, stream_);
  int launched = 0;
  for (int b = 0; b < num_buckets(); ++b) launched += launches_[static_cast<std::size_t>(b)] > 0 ? 1 : 0;
  // Contributions no mark_ready sent out (a gradient never reported counts as final, as in the per-step form).
  for (int b = 0; b < num_buckets(); ++b) {
    if (buffers_[static_cast<std::size_t>(b)].defined()) launch_microbatch(b);
  }
  settle();
  for (int b = 0; b < num_buckets(); ++b) {
    if (options_.scale != 1.0f) scale(ctx, owned_shard(b), options_.scale);
  }
  std::fill(launches_.begin(), launches_.end(), 0);
  std::fill(reports_.begin(), reports_.end(), 0);
  for (int b = 0; b < num_buckets(); ++b) unready_in_bucket_[static_cast<std::size_t>(b)] = unreported(b);
  last_wire_bytes_ = step_wire_bytes_;
  step_wire_bytes_ = 0;
  return launched;
}

}  // namespace cleave::comm
