// ParameterShards: ZeRO-3's parameter store (optimizer.zero_stage 3, docs/multi-rank.md). Each data-parallel
// replica keeps 1/dp of every parameter; a block's parameters exist in full only while the block runs.
//
// Units: the parameters are grouped in units, one per gradient bucket of the data-parallel reduction, and under
// ZeRO-3 those buckets are cut at block boundaries (comm::GradientSpec::unit), so a unit is the parameters of
// one block (those whose first block in the stage it is) laid out exactly like its gradient bucket. Rank r
// keeps block r of each unit: its f32 master shard (what the sharded optimizer updates, in place) and, in
// bf16 runs, the bf16 working shard made from it after every update. The shards of a unit's parameters and of
// its gradients are the same elements, so the optimizer needs no all-gather after its update.
//
// Residency: each stage gets a pipeline::ParameterResidency. Before block i's forward or input-gradient pass,
// acquire(i, next) all-gathers the units block i reads (a tied head also reads the embedding's unit) into
// full buffers in the compute dtype (bf16 in bf16 runs: the gather moves working shards), points the Params'
// compute tensors (value, or working in bf16 runs) at them, and starts the gather of block `next`'s units
// without waiting (prefetch: it travels while block i computes). release(i) drops the views and the buffers of
// units no running block holds. So besides the shards at most two adjacent blocks' units are held in full.
// The weight-gradient pass needs no parameters (it reads stashes), so W gathers nothing.
//
// Outside the step, whole parameters are needed by checkpoints, the parameter gather, weight loading:
// FullParameters gathers every unit's f32 masters (Param::value views) and, when it ends, writes each unit's
// own block back into the master (what a load wrote there), refreshes the working shard and drops the full
// values again.
//
// Invariants: between steps no Param has a value or working tensor (only the shards exist); every gather is a
// collective over its unit's group (dp, or expert-dp for experts) posted in the same order on every member (they
// run the same schedule). Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/gradient_bucketer.hpp"
#include "kernels/ops/context.hpp"
#include "layers/layer.hpp"
#include "pipeline/stage_module.hpp"

namespace cleave::train {

// One unit: bucket `bucket` of `bucketer`, whose gradients [first_grad, end_grad) belong to `params` in order.
// `group`: the ranks that shard it, the bucketer's group (null: `dp`). Expert parallelism: a moe block's experts
// are a unit of their own, sharded and gathered over the expert-dp group (the ranks holding the same experts).
struct ParameterUnit {
  const comm::GradientBucketer* bucketer = nullptr;
  int bucket = 0;
  std::vector<std::shared_ptr<layers::Param>> params;
  comm::Communicator* group = nullptr;
};

class ParameterShards {
 public:
  // Takes this rank's shard of every unit from the Params' values, then drops the values (and any working
  // copies). Installs a residency on every stage (removed by the destructor). `dp`, the bucketers and the
  // stages must outlive this object. Collective over nothing.
  ParameterShards(std::vector<ParameterUnit> units, const std::vector<pipeline::StageModule*>& stages,
                  comm::Communicator& dp, const ops::Context& context);
  ~ParameterShards();
  ParameterShards(const ParameterShards&) = delete;
  ParameterShards& operator=(const ParameterShards&) = delete;

  int num_units() const { return static_cast<int>(units_.size()); }
  // Unit u's f32 master shard (shard-sized; the sharded optimizer's FlatShard::value).
  const Tensor& master(int u) const { return state_.at(static_cast<std::size_t>(u)).master; }
  // bf16 runs: every working shard := its master (after an optimizer step). No-op in f32 runs.
  void refresh_working();
  // Drops gathered units that no running block holds (a prefetch the pass did not use). Waits for them.
  void release_unused();
  // Whether any unit is held in full (tests: nothing is between steps).
  bool any_gathered() const;
  // Unit gathers started so far, and how many of them were prefetches (for tests and the log).
  std::int64_t gathers() const { return gathers_; }
  std::int64_t prefetches() const { return prefetches_; }

  // Full f32 values of every Param (FullParameters). Collective over dp.
  void gather_all();
  // Writes each unit's own block of the full values back into its master, refreshes the working shard and
  // drops the full values. Local.
  void scatter_all();

 private:
  class StageResidency;
  struct UnitState {
    Tensor master;        // f32, this rank's block of the unit
    Tensor working;       // bf16 runs: the bf16 copy of master
    Tensor full;          // while gathered: the whole unit (compute dtype, or f32 under gather_all)
    comm::WorkPtr work;   // the gather in flight
    int holders = 0;      // running blocks that acquired it
  };

  std::int64_t unit_numel(int u) const;
  comm::Communicator& group(int u) const;
  std::int64_t shard_begin(int u) const;
  void gather(int u, DType dtype);  // starts the gather unless the unit is gathered or in flight
  void wait(int u);
  void drop(int u);
  void acquire(const std::vector<int>& units, const std::vector<int>& next);
  void release(const std::vector<int>& units);

  std::vector<ParameterUnit> units_;
  std::vector<UnitState> state_;
  comm::Communicator& dp_;
  ops::Context context_;
  bool bf16_ = false;
  std::vector<std::unique_ptr<StageResidency>> residencies_;
  std::vector<pipeline::StageModule*> stages_;
  std::int64_t gathers_ = 0;
  std::int64_t prefetches_ = 0;
};

// Every Param's full f32 value for the scope of this object (ZeRO-3; nothing to do without it): what is written
// into the values during the scope is kept. Constructing it is collective over dp.
class FullParameters {
 public:
  explicit FullParameters(ParameterShards* shards);
  ~FullParameters();
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  ParameterShards* shards_;
};

}  // namespace cleave::train
