// The memory plan's host line: the page-locked (pinned) host memory a rank holds on a GPU. Three things pin it:
// each micro-batch's inputs and targets, written by the data source into pinned memory for their upload and kept
// until the step ends (engine/train/trainer_impl.cpp, on_run_device and load_microbatch); the step's losses row
// (one f32 per global micro-batch and cp rank, every rank, all run long); and the moe blocks' routing uploads
// (partition/families/moe_staging.hpp). Host memory, not the device's: it is not in MemoryPlan::total() nor under
// device.memory_limit, but it counts against the host's page-locked limit (ulimit -l, the driver's), so the plan
// reports it apart (MemoryPlan::host_pinned). Invariant: the walk holds each thing over the same actions the
// engine does (a micro-batch's batch from the F that loads it to the step's end; a moe block's staging from its F
// to the end of its I or B, under full recomputation only inside the rerun).
// Not counted: pageable host copies (the moe backward's dlogits read-back, checkpoint and report buffers).
#pragma once

#include <cstdint>

#include "engine/config/config.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/model_spec.hpp"

namespace cleave::run_plan {

// One micro-batch's inputs and targets as the trainer stages them for its upload: per sample the model's input
// (spec.sample_input() elements of spec.input_dtype()) and its i32 targets (one per row of the loss's input: T next
// tokens, or one class label), `micro` samples, ÷ cp (cp_shard keeps a cp rank's T / cp tokens of each sequence).
std::int64_t microbatch_upload_bytes(const partition::ModelSpec& spec, std::int64_t micro, int cp);

// The step's losses row (Trainer::Impl::global_mean_loss): one f32 per global micro-batch per cp rank
// (global batch / micro-batch × cp), on every rank.
std::int64_t losses_row_bytes(const config::RunConfig& config);

// The peak of the moe blocks' pinned routing staging on pp rank `pp_rank` over a step, in bytes, as if the run
// were on a GPU. Walks the rank's actions in schedule order: an F of a stage adds, per moe block of the stage and
// the micro-batch, its uploads and balance row, with the ep count exchange's 8·E on top while that block's forward
// dispatches; an I or B frees the stage's micro-batch (each block's at the end of its own backward_input, so never
// above what was held at the I's start). Under train.recompute full the first forward waits for its uploads at
// once (a transient of the larger of the uploads and the dispatch) and the rerun inside the block's I or B holds
// the uploads, the balance row and the dispatch. 0 for a dense model.
std::int64_t moe_staging_peak(const Plan& plan, const config::RunConfig& config, int pp_rank);

// The whole host line of pp rank `pp_rank` as if the run were on a GPU (the CPU pins nothing: estimate_rank_memory
// reports 0 there): the same walk with, on a rank holding the first or the last stage, each micro-batch's
// microbatch_upload_bytes added at the first F that loads it (stage 0's reads the inputs, the last stage's the
// targets; one load serves both) and held to the step's end, under cp the unsharded batch on top while that F
// shards it; plus losses_row_bytes.
std::int64_t host_pinned_peak(const Plan& plan, const config::RunConfig& config, int pp_rank);

}  // namespace cleave::run_plan
