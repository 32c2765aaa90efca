// Stage partitioner: splits a model's ordered block list into contiguous pipeline stages, and places
// stages on pipeline ranks (docs/architecture.md "Pipeline").
//
// Invariant: every block belongs to exactly one stage, stages are contiguous, in block order, and never
// empty. With v virtual stages there are p·v stages; stage s is a model chunk, `place_stages` says which
// pp rank runs it. Pure functions on plain data: the per-block input is a BlockProfile table (the caller
// fills it, e.g. time from partition/cost_model.hpp FLOPs over a device's throughput), so nothing here
// depends on devices or layers.
//
// Methods:
//   uniform     equal block counts; the remainder goes one each to the first stages ([8,8,7,7] for 30/4)
//   parameters  min-max dynamic program over param_bytes (balances parameter memory)
//   cost        min-max dynamic program over time, subject to the per-stage memory cap when one is set
//   manual      blocks_per_stage as given (each ≥ 1, summing to the block count)
// Stage memory estimate (for the cap): Σ param_bytes + inflight[s] · Σ activation_bytes over the stage's
// blocks, where inflight[s] (default 1) is how many micro-batch stashes the schedule keeps alive on that
// stage (1F1B: p − s; GPipe: m). param_bytes should already include gradients / optimizer state if the
// caller wants them counted. A cap set for the other methods is checked after splitting.
//
// To add a method: extend PartitionMethod, its name table in the .cpp and the switch in partition_stages.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/enum_names.hpp"

namespace cleave::partition {

// What the partitioner needs to know about one block (per micro-batch, in any consistent time unit).
struct BlockProfile {
  double time = 0.0;                  // forward + backward time of the block
  std::int64_t param_bytes = 0;       // parameter memory held by the block
  std::int64_t activation_bytes = 0;  // stash kept per micro-batch between forward and backward
};

// parallel.partition.method; the table's order is the order messages list the names in.
enum class PartitionMethod { kUniform, kParameters, kCost, kManual };
constexpr std::array<EnumName<PartitionMethod>, 4> enum_names(PartitionMethod) {
  return {{{PartitionMethod::kCost, "cost"},
           {PartitionMethod::kUniform, "uniform"},
           {PartitionMethod::kParameters, "parameters"},
           {PartitionMethod::kManual, "manual"}}};
}

struct PartitionOptions {
  PartitionMethod method = PartitionMethod::kCost;
  std::vector<int> blocks_per_stage;         // kManual only: one entry per stage
  std::int64_t memory_cap_bytes = 0;         // per-stage cap on the memory estimate; 0 = no cap
  std::vector<double> inflight_microbatches;  // per stage, multiplies activation_bytes; empty = 1 each
};

// Blocks [begin, end) of the model.
struct BlockRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  friend bool operator==(const BlockRange&, const BlockRange&) = default;
};

struct StagePartition {
  std::vector<BlockRange> stages;           // one per stage, contiguous, covering every block once
  std::vector<double> stage_time;           // Σ time per stage
  std::vector<std::int64_t> stage_param_bytes;
  std::vector<double> stage_memory_bytes;   // the memory estimate above

  int num_stages() const { return static_cast<int>(stages.size()); }
  double max_stage_time() const;
  std::vector<int> blocks_per_stage() const;
};

// Splits `blocks` into `num_stages` stages. Throws Error (message starts with "partition:") when
// blocks < stages, a manual list is malformed, or no split fits the memory cap (naming the cap and the
// smallest achievable largest-stage memory).
StagePartition partition_stages(const std::vector<BlockProfile>& blocks, int num_stages,
                                const PartitionOptions& options);

// Where virtual stages live. Looped: stage s on rank s % p (Megatron interleaving). V-shaped: chunk c
// runs left to right on even c and right to left on odd c, so rank r holds stages r and 2p − 1 − r when
// v = 2 (ZB-V): the turn between chunks stays on one rank.
enum class StagePlacement { kLooped, kVShape };

// stage → pp rank for p · v stages. Throws Error if pp_size < 1 or virtual_stages < 1.
std::vector<int> place_stages(int pp_size, int virtual_stages, StagePlacement placement);

// For each rank, its stages in ascending order (the inverse of a placement).
std::vector<std::vector<int>> stages_by_rank(const std::vector<int>& stage_to_rank, int pp_size);

}  // namespace cleave::partition
