// GradientBucketer: data-parallel gradient reduction in buckets that start as soon as they are final
// (docs/architecture.md), overlapping the rest of the backward pass.
//
// The bucketer owns the gradients' memory: one flat buffer per bucket (category kGradients, since the buffers
// ARE the gradients), and grad(i) is a view into it that the caller adopts as Param::grad. Nothing is copied
// before or after the reduction.
//
// Buckets follow the order in which gradients become final during backward (reverse layer order): the
// caller lists the gradients in that order. A bucket closes when the next gradient would take it past
// bucket_mib or has another dtype; a gradient larger than bucket_mib gets a bucket of its own (with units,
// GradientSpec::unit, a bucket is one unit instead). Each gradient
// starts on a 64-byte boundary; the padding is zero and reduced along (harmless).
//
// Per step:  zero_grads() (before the first micro-batch)  →  backward, calling mark_ready(i) when gradient i
// is final (last micro-batch only)  →  finish().
// A bucket is launched (an asynchronous all_reduce sum, or reduce_scatter for ZeRO-1) when all its gradients
// are marked and all earlier buckets are launched: launches happen in bucket order on every rank, so the
// collectives match even if ranks mark gradients in different orders. finish() launches whatever is left
// (gradients never marked count as final), waits for everything and multiplies the result by `scale`
// (1/dp for an average). Call poll() between layers to let MPI progress in-flight buckets.
//
// ZeRO-1 (BucketReduction::kReduceScatter): each bucket is padded to a multiple of the dp size and reduced
// in place with reduce_scatter; after finish() shard(b) (= this rank's block of bucket b) holds the reduced,
// scaled gradient, and the rest of the buffer holds this rank's unreduced gradients. A sharded optimizer maps
// shard elements to parameters with slot(i) and shard_begin(b), updates its shard and all-gathers parameters.
//
// ZeRO-2 (BucketReduction::kReduceScatterOwned): as ZeRO-1, but when a bucket's collective completes (poll()
// or finish()) its reduced block is copied into a shard-sized buffer of its own (shard(b)) and the full
// bucket buffer is released, in bucket order (a bucket whose collective completes before an earlier one's waits
// for it, so which trades happen is timing's but their order is not); with a wire dtype the f32 buffer is
// released right after it was rounded into the staging buffer at launch, and finish() widens the reduced block
// into the shard. The owner must drop its views of a released buffer: options.on_release(b) is called, and
// grad(i) of a released bucket is undefined until the next zero_grads() allocates the buffers again (zeroed). So
// from finish() on this rank holds only its shards of the gradients, and after release_shards() (once the
// optimizer has used them) none: shard(b) is undefined until the bucket's next reduction (and before its
// first). The copy keeps the peak at the full buffers plus what the trades in bucket order add, max over k of
// shard k less what buckets 0..k-1 freed (a shard allocated at launch as the collective's output would add every
// launched shard while the buffers wait for their collectives); unstaged only: a staged bucket's shard comes after
// its buffer is freed.
//
// Per micro-batch (BucketerOptions::per_microbatch, with kReduceScatterOwned: ZeRO-2/3 with optimizer.zero_reduce
// per_microbatch): the buffers exist only while a micro-batch's contributions are written into them. The owner
// calls ensure_buffer(b) before a gradient of bucket b is written (allocating it zeroed; the owner then adopts
// new grad(i) views) and mark_ready(i) once per micro-batch when gradient i has that micro-batch's contributions
// (a gradient may run ahead of its bucket: a tied table written by two local stages). Bucket b is launched when
// every gradient in it has been marked launches(b) + 1 times; launches happen in the order the buckets become
// ready, the same on every rank (they run the same schedule). Each launch first completes the previous one (wait,
// add this rank's reduced block into shard(b), free its buffer), then reduce-scatters the bucket's buffer and
// releases it from the owner (on_release), so at most one bucket is in flight besides the one being filled; the
// memory plan relies on this fixed rule (not on when a collective happens to finish). zero_grads() allocates the
// step's shard accumulators, zeroed; finish() launches any bucket still holding contributions, completes the last
// one and scales the shards. Summation order of a shard: the replicas' sum of micro-batch 0, plus that of 1, ...
// (not the canonical tree of deterministic mode, which therefore reduces per step).
//
// Device: the buffers come from `allocator` and every op on them is enqueued on `stream` (the run's stream, on
// the allocator's device, which must be the stream the allocator orders its blocks and zeroing on, as the run's
// allocator is): zeroing through the allocator (Tensor::zero_), the wire-dtype casts, the ZeRO-2 shard copy and
// the scaling through the op seam (ops::copy, ops::scale_inplace), the collectives posted on the same stream.
// So buckets may live on a GPU (compiled, not run on a GPU); on the CPU the ops are the former host loops, bit for
// bit. f16 gradients have no seam ops: host buffers only.
//
// Files: gradient_bucket_layout.* (which bucket and offset each gradient gets: a pure function), gradient_bucket_ops.*
// (zero, cast and scale on the buffers), gradient_bucketer.cpp (construction, views, the per-step reduction),
// gradient_bucketer_microbatch.cpp (the per-micro-batch reduction).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/gradient_bucket_layout.hpp"

namespace cleave::comm {

enum class BucketReduction {
  kAllReduce,          // plain data parallel: every rank ends with the whole reduced bucket
  kReduceScatter,      // ZeRO-1: in place, this rank's block of the bucket holds the reduced shard
  kReduceScatterOwned  // ZeRO-2: into a shard buffer of its own; the full bucket buffer is released
};

struct BucketerOptions {
  double bucket_mib = 25.0;  // parallel.dp_bucket_mb
  float scale = 1.0f;        // multiplies the reduced gradients (e.g. 1/dp)
  BucketReduction reduction = BucketReduction::kAllReduce;
  // The dtype the collectives carry. Empty (or the gradients' dtype): the buffers themselves are reduced. kBF16
  // with f32 gradients: each bucket is rounded into a bf16 staging buffer (kCommunication) when it launches,
  // reduced there (the MPI backend accumulates in f32) and widened back into the gradients by finish().
  std::optional<DType> wire_dtype;
  // Called right after bucket b's collective is posted (may be empty). Instrumentation only: the failure
  // drills (engine/train/fault_injection.hpp) stop or kill a rank here, inside a bucket reduction.
  std::function<void(int bucket)> after_launch;
  // kReduceScatterOwned: called when bucket b's full buffer is released; the owner drops every view of it
  // (Param::grad) so that its memory returns to the allocator. Must not call back into the bucketer.
  std::function<void(int bucket)> on_release;
  // kReduceScatterOwned only: reduce-scatter every micro-batch into shard accumulators (see the header comment).
  bool per_microbatch = false;
  // With units: pack whole units up to bucket_mib (GradientSpec::unit, group) instead of one bucket per unit.
  bool pack_units = false;
};

class GradientBucketer {
 public:
  using Slot = GradientSlot;      // where a gradient lives (gradient_bucket_layout.hpp)
  using Bucket = GradientBucket;  // numel includes the alignment (and, sharded, dp) padding

  // `dp` must outlive the bucketer; it is used for every bucket's collective.
  GradientBucketer(std::vector<GradientSpec> grads_in_ready_order, Communicator& dp, const BucketerOptions& options,
                   Allocator& allocator, const Stream& stream = cpu_stream());
  ~GradientBucketer();  // waits for buckets still in flight
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  int num_grads() const { return static_cast<int>(specs_.size()); }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const GradientSpec& spec(int index) const;
  const Slot& slot(int index) const;
  const Bucket& bucket(int b) const;

  // Gradient `index` (in ready order) as a view of its bucket, with the spec's shape (undefined while a
  // kReduceScatterOwned bucket is released).
  Tensor grad(int index) const;
  // The flat buffer of bucket b (undefined while released).
  Tensor bucket_buffer(int b) const;
  // kReduceScatter / kReduceScatterOwned: this rank's shard of bucket b, and where it starts in the bucket.
  // kReduceScatterOwned: a buffer of its own, allocated by the reduction, undefined after release_shards().
  Tensor shard(int b) const;
  std::int64_t shard_begin(int b) const;
  bool sharded() const { return options_.reduction != BucketReduction::kAllReduce; }
  bool owns_shards() const { return options_.reduction == BucketReduction::kReduceScatterOwned; }

  // Zeroes every bucket buffer (kReduceScatterOwned: allocates the released ones, zeroed; the owner takes new
  // grad(i) views afterwards). Per micro-batch: allocates the shard accumulators, zeroed, and no buffer.
  void zero_grads();
  bool per_microbatch() const { return options_.per_microbatch; }
  // Per micro-batch: allocates bucket b's buffer, zeroed, unless it exists; true when it did (the owner takes new
  // grad(i) views of the bucket).
  bool ensure_buffer(int b);
  // kReduceScatterOwned: drops every shard (after the optimizer step; the owner drops its views too).
  void release_shards();
  void mark_ready(int index);
  void poll();
  // Returns how many buckets mark_ready() had launched before finish() was called (the overlapped ones).
  int finish();
  // Bytes one step's collectives carry from this rank: every bucket in the wire dtype.
  std::int64_t wire_bytes_per_step() const;

 private:
  void launch_ready_buckets();
  void mark_ready_microbatch(int index);  // per micro-batch: mark_ready()
  int finish_microbatch();               // per micro-batch: finish()
  void launch_microbatch(int b);  // per micro-batch: completes the bucket in flight, then reduces bucket b
  void settle();                  // per micro-batch: completes every bucket in flight (into the shards)
  int unreported(int b) const;    // per micro-batch: gradients of b marked fewer than launches(b) + 1 times
  void launch(int b);
  void release(int b);  // kReduceScatterOwned: drops bucket b's full buffer and tells the owner
  void complete(int b);  // kReduceScatterOwned, unstaged: copies the reduced block into its shard, releases the bucket
  Tensor block(const Tensor& whole, int b) const;  // this rank's block of a bucket-sized tensor
  Tensor& owned_shard(int b);  // owned_[b], allocated if released

  std::vector<GradientSpec> specs_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<Tensor> buffers_;
  std::vector<Tensor> staging_;  // wire_dtype != gradient dtype: one buffer per bucket in the wire dtype
  bool staged_ = false;          // whether buckets travel through staging_ (kReduceScatterOwned allocates it at launch)
  std::vector<Tensor> owned_;    // kReduceScatterOwned: this rank's shard of every bucket
  Allocator* allocator_ = nullptr;
  Communicator& dp_;
  BucketerOptions options_;
  Stream stream_;
  std::vector<char> ready_;
  std::vector<int> unready_in_bucket_;
  std::vector<WorkPtr> works_;
  int next_launch_ = 0;
  int launched_early_ = 0;
  // Per micro-batch.
  struct InFlight {
    int bucket = 0;
    Tensor sent;  // the reduced buffer (f32, or its wire copy); this rank's block holds the result
    WorkPtr work;
  };
  std::vector<InFlight> in_flight_;
  std::vector<int> launches_;        // per bucket, this step
  std::vector<int> reports_;         // per gradient, this step
  std::int64_t step_wire_bytes_ = 0;  // this step's launches so far
  std::int64_t last_wire_bytes_ = 0;  // the last finished step's
};

}  // namespace cleave::comm
