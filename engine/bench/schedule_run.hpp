// One schedule benchmarked for real: warm-up steps, then N measured steps of training under the schedule,
// and the simulator's prediction for the per-action costs measured in the median step, side by side.
// Invariant: every number a report prints comes from here, and the measured bubble is computed from the
// same measured timeline the report draws (pipeline::timeline_stats), so table and picture agree.
// Collective over `world`: every rank calls it with the same arguments; rank 0 gets the gathered figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "partition/measured_costs.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::bench {

// "interleaved_1f1b:4" -> {"interleaved_1f1b", 4}; a bare name -> {name, 1} (the schedule's default).
struct ScheduleChoice {
  std::string name;
  int virtual_stages = 1;
  std::string label() const;  // "zb_v", "interleaved_1f1b:4"
};

// Parses `all` (every registered schedule at its default virtual stages) or a comma list of name[:v].
// Throws InputError (bad input: exit 64) naming an unknown entry and listing the known schedules, or naming an entry
// listed twice.
std::vector<ScheduleChoice> parse_schedule_list(const std::string& text);

struct ScheduleRun {
  ScheduleChoice choice;
  int stages = 0;                  // pipeline stages (pp x virtual)
  int pp_size = 1;
  int microbatches = 0;            // per pipeline (per dp replica)
  double first_loss = 0;           // step 1's loss (checked equal across schedules)
  std::vector<double> step_ms;     // measured steps
  double median_step_ms = 0;
  double tokens_per_s = 0;         // global items / median step time
  std::vector<std::int64_t> peak_bytes;       // per world rank: allocator peak over the measured steps
  std::vector<std::int64_t> peak_activations; // per world rank: activation peak
  std::vector<std::int64_t> p2p_bytes;        // per world rank: pipeline boundary bytes sent in one step
  pipeline::Schedule schedule;                // lowered, as executed (pp ranks of dp/tp group 0)
  pipeline::Timeline measured;                // the median step, pp ranks of dp/tp group 0, ms
  pipeline::TimelineStats measured_stats;
  pipeline::SimulationCosts costs;            // per-stage F/I/W means of the measured step, P2P from p2p_fit
  partition::AlphaBeta p2p_fit;               // pp > 1: ping-pong fit between world rank pairs, timed after the steps
  pipeline::SimulationResult predicted;
  // The simulator replaying the median step: every compute action at its own measured duration (not its
  // stage's mean), P2P from p2p_fit. Measured vs replayed = what the runtime adds beyond compute and the link
  // (waits the model does not know); replayed vs predicted = what action-to-action variation costs.
  pipeline::SimulationResult replayed;
};

// A listed schedule the config cannot run, and why (the plan's own error: too few micro-batches per step,
// more stages than blocks, the memory cap, ...). The bench reports it beside the schedules that ran.
struct SkippedSchedule {
  ScheduleChoice choice;
  std::string reason;
};

// The config at `config_path` with `overrides` as every schedule's run reads it apart from the schedule: evaluation
// off (train.eval_batches 0), so a config without an evaluation split (data.val_fraction 0) benchmarks too.
config::RunConfig bench_config(const std::string& config_path, const std::vector<std::string>& overrides);

// Why the config at `config_path` with `overrides` cannot run under `choice` on `world_size` ranks, or ""
// when it can: the config and the plan that run_schedule would build, checked without training. Pure (no
// communication), so every rank gets the same answer and the bench can check every schedule before the first.
std::string schedule_problem(const std::string& config_path, const std::vector<std::string>& overrides,
                             const ScheduleChoice& choice, int world_size);

// Trains the config at `config_path` with `overrides` and the schedule set to `choice` for warmup + steps
// steps (evaluation off: a benchmark of the training step; train.trace on) on `world`. A schedule the
// config cannot run (e.g. more micro-batches needed than the batch has) is an Error naming the schedule.
ScheduleRun run_schedule(const std::string& config_path, const std::vector<std::string>& overrides,
                         const ScheduleChoice& choice, int steps, int warmup, comm::Communicator& world);

}  // namespace cleave::bench
