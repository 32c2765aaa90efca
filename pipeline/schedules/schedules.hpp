// Schedule generators (one file each in this folder) and the registry that picks one by name.
//
// Every generator is a pure function of (pp_size, micro-batches[, virtual stages]) returning a compute
// schedule (F / I / W / B only; lowering.hpp adds communication). Each file opens with its ordering
// rule, warm-up count and memory bound; docs/schedules.md has the bubble formulas. Micro-batches run in
// increasing order on every stage. Bad arguments throw Error naming the numbers and what is allowed.
//
// To add a schedule: a new file here with its generator, a declaration below, an entry in registry.cpp,
// and a row in docs/schedules.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

// GPipe: all forwards, then all backwards (B). One stage per rank.
Schedule gpipe_schedule(int pp_size, int num_microbatches);
// 1F1B (PipeDream-flush): warm-up forwards, then alternate one F and one B. One stage per rank.
Schedule one_f_one_b_schedule(int pp_size, int num_microbatches);
// Interleaved 1F1B (Megatron): v ≥ 2 looped chunks per rank; any number of micro-batches.
Schedule interleaved_1f1b_schedule(int pp_size, int num_microbatches, int virtual_stages);
// ZB-H1 (Qi et al. 2023): 1F1B with B split into I and W, W deferred into the bubbles. One stage per rank.
Schedule zb_h1_schedule(int pp_size, int num_microbatches);
// ZB-H2 (Qi et al. 2023): zero bubble with 2p − 1 live stashes per rank (extra warm-up forwards, W in the
// tail). One stage per rank; any m (a bubble remains for m < 2p − 1).
Schedule zb_h2_schedule(int pp_size, int num_microbatches);
// ZB-V (Qi et al. 2023, §6): two chunks per rank in V-shaped placement, split I / W.
Schedule zb_v_schedule(int pp_size, int num_microbatches);
// DualPipeV (DeepSeek 2025): ZB-V's placement, forward of one micro-batch paired with the backward of
// another. Needs m >= dualpipev_min_microbatches(pp_size) = 2 · pp_size (an Error names the numbers).
Schedule dualpipev_schedule(int pp_size, int num_microbatches);
int dualpipev_min_microbatches(int pp_size);
// The automatic zero-bubble scheduler with F = I = W = 1 and memory limit pp_size (auto_schedule.hpp has
// the general form with costs and a memory limit).
Schedule auto_schedule_uniform(int pp_size, int num_microbatches);

// "gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v", "dualpipev", "auto".
std::vector<std::string_view> schedule_names();
bool is_schedule_name(std::string_view name);
// Virtual stages a schedule uses when none is given: 2 for interleaved_1f1b, zb_v and dualpipev, else 1.
int default_virtual_stages(std::string_view name);

// The fewest micro-batches per step the named schedule runs with at pp_size ranks (2 · pp_size for
// dualpipev, 1 for the others). Throws Error for an unknown name.
int schedule_min_microbatches(std::string_view name, int pp_size);

// Builds the named schedule. Throws Error for an unknown name (listing the known ones) or an impossible
// combination (e.g. `schedule 1f1b runs one stage per rank, got virtual_stages 2 ...`) or too
// few micro-batches (`schedule dualpipev needs at least 2 × pp_size = 8 micro-batches per step, got 6 ...`).
Schedule make_schedule(std::string_view name, int pp_size, int num_microbatches, int virtual_stages);
// make_schedule's checks alone (the same errors in the same order; no generator checks more): for a caller that
// refuses the schedule for another reason before building it (run_plan::make_plan: more stages than blocks).
void check_schedule_args(std::string_view name, int pp_size, int num_microbatches, int virtual_stages);
// The virtual-stage rule alone (`schedule 1f1b runs one stage per rank ..., got virtual_stages 3`), which needs no
// world size: the config reader refuses parallel.virtual_pipeline_stages with it. Throws Error.
void check_virtual_stages(std::string_view name, int virtual_stages);

namespace detail {
// Shared argument checks of the generators.
void check_generator_args(std::string_view name, int pp_size, int num_microbatches);
}  // namespace detail

}  // namespace cleave::pipeline
