// Plan: what every rank agrees on before training — the ModelSpec, the stage partition, the schedule and
// which stages this pp rank holds. Pure function of (config, micro-batches, pp rank): every rank computes
// the same plan without talking to the others.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/run_plan/schedule_cache.hpp"
#include "partition/model_spec.hpp"
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedule.hpp"

namespace cleave::run_plan {

struct Plan {
  partition::ModelSpec spec;
  partition::StagePartition partition;  // one block range per stage (pp × virtual stages)
  pipeline::Schedule schedule;          // lowered: the executor's input
  std::vector<int> local_stages;        // stages this pp rank holds, ascending
  int tp_size = 1;                      // boundary tensors of the loss block are vocab shards
  bool sequence_parallel = false;       // residual-stream boundaries are sequence shards [micro, T / tp, D]
  int cp_size = 1;                      // context parallel: every boundary holds T / cp tokens of each sample

  int num_stages() const { return partition.num_stages(); }
  int stage_to_rank(int stage) const { return schedule.rank_of(stage); }
  // The stages pp rank `pp_rank` holds, ascending (what local_stages is for that rank).
  std::vector<int> stages_on(int pp_rank) const;
  // Shape of the activation entering `stage` (> 0) for one micro-batch, e.g. [micro, T, D].
  Shape boundary_shape(int stage, std::int64_t micro_batch) const;
  // The stage holding the first block of `kind` (-1 if the model has none).
  int stage_of_block(partition::BlockKind kind) const;
  // True when a tied embedding table exists twice: the embedding and the head on different pp ranks
  // (with ZB-V's V placement the head need not be on the last pp rank).
  bool tied_table_split() const;
  std::string describe_partition() const;  // "blocks per stage [3,2,2]"
  // The schedule as the run log names it: "schedule 1f1b" over pp > 1 ranks, "schedule zb_v on one rank, running
  // its 2 chunks" when a multi-chunk schedule runs at pp 1, else "single stage".
  std::string describe_schedule() const;
  // The same without the word "schedule", as run.json's "schedule" and the report's schedule row give it: "1f1b",
  // "zb_v on one rank, running its 2 chunks", "single stage".
  std::string schedule_label() const;
};

// Virtual stages used for a schedule: the config's value, except that interleaved_1f1b and zb_v use
// their default (2) when the config leaves it at 1.
int effective_virtual_stages(const config::RunConfig& config);

// Throws Error for a layout the engine cannot run (a schedule the batch cannot feed; more stages than blocks: a
// ConfigKeyError on parallel.pipeline_model_parallel_size, or virtual_pipeline_stages where the config sets it), and
// InputError (bad input, exit 64) for a memory cap the split exceeds: one error with the numbers, when a rank's
// memory plan exceeds device.memory_limit.
// cpu is the run's resolved CPU kernels the memory plan reads (memory_plan.hpp, CpuKernels); without it
// unresolved_cpu_kernels (the widened GEMM path, an upper bound). `cache` (optional): schedules built by earlier
// calls, reused (a search).
struct CpuKernels;
Plan make_plan(const config::RunConfig& config, int num_microbatches, int pp_rank, ScheduleCache* cache = nullptr);
Plan make_plan(const config::RunConfig& config, int num_microbatches, int pp_rank, const CpuKernels& cpu,
               ScheduleCache* cache = nullptr);

// The block list of the configured model (partition/model_spec.hpp).
partition::ModelSpec model_spec(const config::ModelConfig& model);

// Bytes one parameter costs in training besides its value: gradient plus optimizer state, per byte of
// value (adamw: 1 + 2, sgd with momentum: 1 + 1, plain sgd: 1).
double training_bytes_per_param_byte(const config::OptimizerConfig& optimizer);

}  // namespace cleave::run_plan
