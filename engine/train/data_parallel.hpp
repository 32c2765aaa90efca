// DataParallel: this rank's gradient reduction over its data-parallel replicas (docs/architecture.md), overlapped with
// the backward pass, and ZeRO-1 (optimizer.zero_stage = 1) on top of it.
//
// Gradients live in the flat buffers of a GradientBucketer (engine/comm/gradient_bucketer.hpp) and each
// Param::grad is a view into them, adopted at construction — before any optimizer exists, since optimizers
// may keep the grad tensors. The buckets follow the order in which gradients become final: the stages'
// grad-final callbacks (pipeline/stage_module.hpp) fire during each stage's last weight-gradient pass, block
// by block in reverse, and stages finish in the order of their last W/B action in this rank's schedule. So
// the ready order is: local stages by the position of their last W/B, each stage's parameters in reverse
// forward order, a parameter that several local blocks share (a tied table with embedding and head on this
// rank) at its last report. Within a block the order does not matter: a block reports all its parameters
// at once. A bucket's collective starts as soon as its last gradient is reported and all earlier buckets
// have started; the reduction is a sum, then scaled by 1/dp.
//
// Tied embedding table split over two pp ranks: its two copies' gradients must be summed over the tied
// group BEFORE the data-parallel reduction (with ZeRO-1 a reduce-scatter of an un-summed copy would leave
// each shard with half the gradient; Megatron issue #844). The table therefore has a bucket of its own (its
// own bucketer, launched last): when its gradient is final the tied all-reduce starts asynchronously, and
// end_step() waits for it, then starts the table's data-parallel reduction.
//
// ZeRO-1: buckets are reduce-scattered; each rank's shard of every bucket holds the reduced gradient. The
// parameter values are also views into flat buffers laid out like the gradient buckets (copied in once at
// construction), so this rank updates its shard in place (optim::ShardedOptimizer, state for the shard
// only) and an in-place all_gather per bucket gives every rank all updated values.
//
// ZeRO-2: as ZeRO-1, but when a bucket's reduce-scatter completes its shard moves to a buffer of its own and
// the full bucket buffer is released (comm::BucketReduction::kReduceScatterOwned): the Param::grad views of
// a released bucket are reset to undefined tensors, and begin_step() allocates the buckets again and
// re-adopts the views. From end_step() to the end of sharded_step() this rank holds only its shard of the
// gradients (1/dp), and between steps none. Within the step the full local gradient still exists from
// begin_step() until its bucket is reduced: deterministic mode sums the micro-batches of a replica locally,
// in the canonical order, before the replicas are summed (a reduce-scatter per micro-batch would add the
// same terms in another order and lose bit-identity with plain data parallel).
//
// Per micro-batch (options.per_microbatch: optimizer.zero_reduce per_microbatch, ZeRO-2 and 3): the buckets are
// reduce-scattered in every micro-batch, not once per step (comm::BucketerOptions::per_microbatch). The stages
// report each parameter before and after every weight-gradient pass of its block (StageModule's pass
// callbacks): before, its bucket's buffer is allocated (zeroed) if it is not, and the bucket's grad views are
// taken again; after, once the micro-batch's last contribution is in (a tied table written by two blocks: after
// the second), the parameter is marked, and a bucket whose parameters are all marked is reduce-scattered and
// its buffer released, this rank's block added into its shard. So within the step this rank holds its shards
// (1/dp) and at most two buckets (the one in flight, the one being filled), not the full local gradient. To keep
// a bucket's lifetime inside one weight-gradient pass, ZeRO-2's buckets pack whole blocks of one stage up to
// parallel.dp_bucket_mb (a block larger than that alone), and a parameter several blocks write (a tied table)
// is a bucket of its own; ZeRO-3's are its units. A tied table split over pp ranks keeps its own bucket reduced
// once per step (its copies are summed over the tied group first). Deterministic mode and sequence parallelism
// reduce per step (config::resolved_zero_reduce says why).
//
// ZeRO-3: as ZeRO-2, with buckets cut at block boundaries (one per block: comm::GradientSpec::unit), and the
// parameters sharded too: ParameterShards (parameter_shards.hpp) keeps this rank's f32 master shard of every
// bucket — the same elements as its gradient shard, so the sharded optimizer updates it in place and nothing
// is all-gathered after the step — and gathers each block's bucket around the block's forward and
// input-gradient pass, prefetching the next block's. Between steps no Param has a value.
//
// Expert parallelism (Param::ep_size > 1; options.expert_replicas): the expert tensors are this rank's experts, held
// alike only by the expert-dp group (dp × cp / ep ranks), so they have a bucketer of their own over that group,
// reduced after the main buckets (launched as their gradients become final, finished after the main ones in
// end_step). Their shards (for the norm, and ZeRO's optimizer state and update, all-gathered back over the
// expert-dp group) are over the expert-dp group, as Megatron's and DeepSpeed's MoE sharding does. ZeRO-2: the
// expert buckets are reduce-scattered into owned shards and released like the main ones, always once per step
// (optimizer.zero_reduce per_microbatch applies to the main buckets; the experts' stay whole through the
// backward). ZeRO-3: the expert buckets are cut at the same blocks as the main ones, and each is a unit of its own
// in ParameterShards, sharded and gathered over the expert-dp group (a moe block reads two units: its non-expert
// parameters over dp × cp, its experts over expert-dp). The norm counts each element once: the ep ranks hold
// different experts and the expert-dp shards partition each rank's experts.
//
// Gradient norm: every rank sums the squares of its shard of each bucket (the same dp shards in both
// modes, so plain data parallel and ZeRO-1 compute the same norm bit for bit), the caller reduces the sum
// over the whole world (dp × tp × pp) and filters parameters another rank counts.
//
// Per step: begin_step() (zero grads) → executor step (callbacks mark gradients) → end_step() →
// local_grad_sum_of_squares() → clip() → optimizer step (sharded_step() under ZeRO-1). Not thread-safe; all
// members of the dp group must call the collective members in the same order (they run the same plan).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "kernels/ops/context.hpp"
#include "engine/comm/gradient_bucketer.hpp"
#include "engine/config/config.hpp"
#include "engine/optim/sharded_optimizer.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/parameter_shards.hpp"
#include "pipeline/stage_module.hpp"

namespace cleave::train {

struct DataParallelOptions {
  double bucket_mib = 25.0;            // parallel.dp_bucket_mb
  int zero_stage = 0;  // optimizer.zero_stage: 0 plain, 1 sharded optimizer, 2 also sharded grads, 3 also params
  config::OptimizerConfig optimizer;   // hyper-parameters of the ZeRO-1 optimizer
  // Multiply the summed gradients by 1/dp. The trainer turns it off: its loss scale already divides by dp,
  // so every micro-batch gradient carries the same factor 1/(global micro-batches) on one rank and on many.
  bool average = true;
  DType grad_wire_dtype = DType::kF32;  // parallel.grad_reduce_dtype: the dtype buckets travel in
  bool per_microbatch = false;  // zero_stage >= 2: reduce-scatter every micro-batch (optimizer.zero_reduce)
  ops::Context context;                // the run's op context: buckets, shards and state use its allocator
  std::function<void(int bucket)> after_bucket_launch;  // test hook (BucketerOptions::after_launch), main buckets
  // Expert parallelism: the expert-dp group that reduces parameters with ep_size > 1 (null: there are none).
  comm::Communicator* expert_replicas = nullptr;
};

// What one step's reduction did (for tests and benchmarks).
struct DataParallelStepReport {
  int buckets = 0;                      // main buckets (the split tied table's own bucket not counted)
  int launched_before_finish = 0;       // main buckets started by the grad-final callbacks
  int launched_before_last_report = 0;  // main buckets started while backward work was still to come
  std::int64_t wire_bytes = 0;          // bytes the step's bucket collectives carried from this rank
};

class DataParallel {
 public:
  // `stages`: this rank's stages by stage index; `params`: their parameters, each Param once. `dp` (and
  // `tied_group`, non-null when this rank holds one copy of a tied table split over pp ranks) must outlive
  // this object, as must the stages. Adopts grad views (and, ZeRO-1, value views) into every Param and
  // installs the grad-final callback on every stage. Collective over nothing; cheap to construct.
  DataParallel(const run_plan::Plan& plan, int pp_rank, const std::map<int, pipeline::StageModule*>& stages,
               const optim::ParamList& params, comm::Communicator& dp, comm::Communicator* tied_group,
               const DataParallelOptions& options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Zeroes every gradient (before the first micro-batch).
  void begin_step();
  // After the executor's step: finishes the tied sum and every bucket. Afterwards (plain) every grad holds
  // the replicas' mean, or (ZeRO-1) this rank's shard of every bucket does. Collective over dp.
  DataParallelStepReport end_step();
  // Exact sum of squares of this rank's shard of every gradient that `counted` accepts (all when empty).
  kernels::ExactSquareSum local_grad_sum_of_squares(const optim::ParamFilter& counted = {}) const;
  // Clips by the global norm (optim::clip_grads semantics): every grad (plain) or this rank's shard (ZeRO-1).
  double clip(double max_norm, double norm);
  // ZeRO-1: updates this rank's shard with the sharded optimizer, then all-gathers the parameters.
  // Collective over dp.
  void sharded_step(double lr);

  // ZeRO-1, 2 or 3: a sharded optimizer updates this rank's shard of every bucket.
  bool sharded() const { return options_.zero_stage >= 1; }
  int zero_stage() const { return options_.zero_stage; }
  // ZeRO-3's parameter store (null under stages 0-2).
  ParameterShards* parameter_shards() { return parameter_shards_.get(); }
  const ParameterShards* parameter_shards() const { return parameter_shards_.get(); }
  // ZeRO-1, 2 and 3 only (null otherwise).
  const optim::ShardedOptimizer* sharded_optimizer() const { return sharded_optimizer_.get(); }
  optim::ShardedOptimizer* sharded_optimizer() { return sharded_optimizer_.get(); }
  // Parameter names in ready (bucket) order, the split tied table last.
  std::vector<std::string> ready_order() const;
  int num_buckets() const;

 private:
  struct Entry {
    layers::Param* param = nullptr;
    comm::GradientBucketer* bucketer = nullptr;
    int index = 0;          // in that bucketer's ready order
    int expected_reports = 1;
    int reports = 0;
  };

  using ParamPtr = std::shared_ptr<layers::Param>;
  using ReportCounts = std::unordered_map<const layers::Param*, int>;  // reports per step, by parameter

  // Construction, in this order. The ready order's parameters into split_table_ (with a tied group), the experts'
  // expert_order_ and the rest's order_.
  void split_ready_order(const std::vector<ParamPtr>& sequence, const std::string& tied_name,
                         const ReportCounts& reports);
  // The three bucketers (main over `specs`, the split table's, the experts' cut at `unit_of` under ZeRO-3), each
  // parameter's grad a view into its bucketer's buffers, and the main bucketer's launch mirror.
  void make_bucketers(std::vector<comm::GradientSpec> specs, const std::unordered_map<const layers::Param*, int>& unit_of,
                      const ReportCounts& reports, bool per_microbatch);
  void adopt_grads(comm::GradientBucketer& bucketer, const std::vector<ParamPtr>& order, const ReportCounts& reports);
  // ZeRO-1/2's flat values, every bucket's shard, ZeRO-3's parameter store and the sharded optimizer; returns the
  // optimizer state's bytes.
  std::int64_t make_shards_and_optimizer(const std::map<int, pipeline::StageModule*>& stages);
  void make_parameter_shards(const std::map<int, pipeline::StageModule*>& stages);  // ZeRO-3
  // The stages' grad callbacks: per pass under per-micro-batch reduction, else the grad-final one.
  void connect_stages(const std::map<int, pipeline::StageModule*>& stages, bool per_microbatch);
  std::vector<ParamPtr> table_order() const;  // {split_table_}, or empty

  void on_grad_final(const layers::Param& param);
  void on_grad_begin(const layers::Param& param);  // per micro-batch: the bucket's buffer before a write
  void on_grad_done(const layers::Param& param);   // per micro-batch: one block's pass is done with param
  // ZeRO-2: points shards_ and the sharded optimizer at the bucketers' current shard buffers (undefined once
  // released).
  void adopt_shard_grads();
  std::vector<optim::FlatShard> make_shards(const comm::GradientBucketer& bucketer,
                                            const std::vector<std::shared_ptr<layers::Param>>& order,
                                            const std::vector<Tensor>& values, const comm::Communicator& group) const;
  std::vector<Tensor> flatten_values(const comm::GradientBucketer& bucketer,
                                     const std::vector<std::shared_ptr<layers::Param>>& order) const;
  void all_gather_values(const comm::GradientBucketer& bucketer, const std::vector<Tensor>& values,
                         std::vector<comm::WorkPtr>& works, comm::Communicator& group) const;
  // Construction's summary on dp rank 0's log (`elements`: this rank's parameter elements).
  void log_layout(std::int64_t elements, std::int64_t state_bytes, bool per_microbatch) const;

  DataParallelOptions options_;
  comm::Communicator& dp_;
  comm::Communicator* tied_group_;
  std::vector<pipeline::StageModule*> stages_;
  std::vector<std::shared_ptr<layers::Param>> order_;  // main bucketer's ready order
  std::shared_ptr<layers::Param> split_table_;          // null unless the tied table is split over pp ranks
  std::unique_ptr<comm::GradientBucketer> bucketer_;
  std::unique_ptr<comm::GradientBucketer> table_bucketer_;
  std::vector<std::shared_ptr<layers::Param>> expert_order_;  // expert-parallel parameters, in ready order
  std::unique_ptr<comm::GradientBucketer> expert_bucketer_;   // over options_.expert_replicas
  std::vector<Tensor> expert_values_;  // ZeRO-1: the expert bucketer's flat parameter buffers
  std::vector<Tensor> values_;        // ZeRO-1: flat parameter buffers, one per bucket of bucketer_
  std::vector<Tensor> table_values_;  // ZeRO-1: the same for table_bucketer_
  std::vector<optim::FlatShard> shards_;  // this rank's shard of every bucket (both bucketers)
  optim::ParamList clip_params_;          // order_, the split table, expert_order_: each once (clip without ZeRO)
  mutable std::vector<Tensor> grad_list_;  // the norm's, clipping's and ZeRO-2/3 adoption's tensor list (empty between)
  std::unique_ptr<optim::ShardedOptimizer> sharded_optimizer_;
  std::unique_ptr<ParameterShards> parameter_shards_;  // ZeRO-3 (after the bucketers: it keeps pointers to them)
  std::unordered_map<const layers::Param*, Entry> entries_;
  std::vector<int> unready_in_bucket_;  // mirror of the main bucketer's launch rule, for the report
  int launched_ = 0;
  int launched_at_last_report_ = 0;
  comm::WorkPtr tied_work_;
};

}  // namespace cleave::train
