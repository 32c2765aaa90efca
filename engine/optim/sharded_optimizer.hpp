// ShardedOptimizer: the ZeRO-1 optimizer — AdamW or SGD over this data-parallel rank's shard of flat
// parameter and gradient buffers, with optimizer state only for that shard.
//
// The caller (engine/train/data_parallel.hpp) keeps parameters and gradients in flat buffers, one per
// gradient bucket, cut into dp equal shards. A FlatShard is this rank's piece of one buffer pair; its
// segments say which elements belong to which parameter (alignment and dp padding belong to none and are
// never updated). The update of an element depends only on that element, so updating shard by shard is the
// same arithmetic as the per-parameter Optimizer (bit for bit: the same kernels run on the same values).
// Gathering the updated shards back to every rank is the caller's job: this file knows no communicator.
//
// Invariants:
//  - State (exp_avg and exp_avg_sq, or momentum_buffer) is one tensor per shard per kind, shard-sized,
//    zeroed, in MemoryCategory::kOptimizerState, allocated at construction; step() allocates nothing. So
//    state bytes are ~1/dp of the unsharded optimizer's.
//  - Weight decay per segment: only segments whose Param has weight_decay == true are decayed.
//  - step(lr) reads the shard grads and leaves them as they were.
//  - ZeRO-2 swaps the grad tensors between steps (set_shard_grads); segments and state never change.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/context.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optimizer.hpp"
#include "layers/layer.hpp"

namespace cleave::optim {

// Elements [begin, begin + numel) of a shard belong to `param`, starting at its element `param_offset`.
struct ShardSegment {
  std::int64_t begin = 0;
  std::int64_t numel = 0;
  std::int64_t param_offset = 0;
  const layers::Param* param = nullptr;
};

// This rank's shard of one flat buffer pair. value may be undefined where only gradients are flat (norms
// and clipping under plain data parallelism).
struct FlatShard {
  Tensor value;  // f32, shard-sized view into the flat parameter buffer
  Tensor grad;   // f32, shard-sized view into the flat gradient buffer
  std::vector<ShardSegment> segments;  // ascending, non-overlapping
};

class ShardedOptimizer {
 public:
  virtual ~ShardedOptimizer() = default;
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  // One update of every segment of every shard. Synchronous.
  void step(double lr);
  // Bytes of optimizer state held (what the allocator counts under kOptimizerState for this optimizer).
  std::int64_t state_bytes() const;
  std::int64_t steps_done() const { return steps_; }
  // Restores the update count from a checkpoint (the next step() is update number n + 1).
  void set_steps_done(std::int64_t n) { steps_ = n; }
  // ZeRO-2: the shards' gradients move between steps (the bucketer allocates them when a bucket is reduced
  // and drops them after the update): grads[s] becomes shard s's grad, f32 with the shard's element count,
  // or undefined to let the optimizer hold no reference between steps (step() then must not run).
  void set_shard_grads(const std::vector<Tensor>& grads);
  // Runs the updates in the run's op context: its device, stream (docs/cuda.md, "The trainer on `cuda`": a GPU
  // update must be enqueued on the run's stream, after the kernels that wrote the gradients), handles and slot
  // table. The state keeps the allocator it was made on. CLEAVE_CHECK: the parameters live on run.device.
  void run_on(const ops::Context& run);
  const std::vector<FlatShard>& shards() const { return shards_; }
  // The state kinds ("exp_avg", "exp_avg_sq" | "momentum_buffer" | none) and state_tensor(k, s): kind k's
  // shard-sized tensor of shard s (index it with ShardSegment::begin). For checkpoints.
  const std::vector<std::string>& state_names() const { return state_names_; }
  const Tensor& state_tensor(std::size_t k, std::size_t s) const { return state_[k][s]; }

 protected:
  explicit ShardedOptimizer(std::vector<FlatShard> shards);
  // Adds one zeroed shard-sized state tensor per shard, of kind `name`.
  void add_state(const std::string& name, Allocator& allocator);
  ops::Context ctx_;  // where the updates run: the parameters' device, the state's allocator, the run's stream (run_on)
  // Updates every segment of every shard for update number `step` (1-based), in one multi-tensor call;
  // state_[k][s] is shard s's k-th state tensor (index it with a segment's begin).
  virtual void update(float lr, std::int64_t step) = 0;
  // Calls f(s, begin, end, weight decay) for every segment of every shard in order: [begin, end) is the
  // segment's range in shard s's flat tensors, the decay `weight_decay` or 0 for a parameter exempt from it.
  template <class F>
  void for_each_segment(double weight_decay, F&& f) const {
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      for (const ShardSegment& segment : shards_[s].segments) {
        const float wd = segment.param->weight_decay ? static_cast<float>(weight_decay) : 0.0f;
        f(s, segment.begin, segment.begin + segment.numel, wd);
      }
    }
  }

  std::vector<FlatShard> shards_;
  std::vector<std::string> state_names_;
  std::vector<std::vector<Tensor>> state_;  // [state kind][shard]

 private:
  std::int64_t steps_ = 0;
};

class ShardedAdamW final : public ShardedOptimizer {
 public:
  ShardedAdamW(std::vector<FlatShard> shards, const AdamWOptions& options, Allocator& allocator);

 private:
  void update(float lr, std::int64_t step) override;
  AdamWOptions options_;
  std::vector<ops::AdamWItem> items_;  // the call's list (empty between steps)
};

class ShardedSgd final : public ShardedOptimizer {
 public:
  ShardedSgd(std::vector<FlatShard> shards, const SgdOptions& options, Allocator& allocator);

 private:
  void update(float lr, std::int64_t step) override;
  SgdOptions options_;
  std::vector<ops::SgdItem> items_;
};

// optimizer.type -> ShardedAdamW or ShardedSgd with the section's hyper-parameters.
std::unique_ptr<ShardedOptimizer> make_sharded_optimizer(const config::OptimizerConfig& config,
                                                         std::vector<FlatShard> shards, Allocator& allocator);

// Exact sum of g² over the segments of `shards` whose Param `counted` accepts (all when empty), like
// grad_clip.hpp: the same digits however the gradients are split into shards.
kernels::ExactSquareSum shard_grad_sum_of_squares(const std::vector<FlatShard>& shards, const ParamFilter& counted = {},
                                 const ops::Context& ctx = {});

// clip_grads (grad_clip.hpp) on shard grads: scales every shard grad by max_norm / (norm + 1e-6) when
// norm > max_norm, with the same float factor clip_grads would use. Returns the factor (1 when off).
double clip_shard_grads(const std::vector<FlatShard>& shards, double max_norm, double norm,
                        const ops::Context& ctx = {});

// The same two, listing the segments into `list`: the caller's, refilled each call (kept from step to step, so a
// steady-state step allocates no list).
kernels::ExactSquareSum shard_grad_sum_of_squares(const std::vector<FlatShard>& shards, const ParamFilter& counted,
                                                  const ops::Context& ctx, std::vector<Tensor>& list);
double clip_shard_grads(const std::vector<FlatShard>& shards, double max_norm, double norm, const ops::Context& ctx,
                        std::vector<Tensor>& list);

}  // namespace cleave::optim
