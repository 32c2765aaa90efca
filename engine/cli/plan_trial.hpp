// `cleave plan --trial K`: the planner checks itself. The top K plans are trained for a few real steps each
// and re-ranked by their measured step time, printed beside the prediction.
//
// How the steps run: `cleave plan` itself runs without MPI (Open MPI does not nest launchers: a process started
// by mpiexec cannot start another mpiexec job). For each plan it writes the plan's config (the source config
// with the plan's keys set, `--trial-steps` steps into a run directory of its own, no evaluation, no report,
// no checkpoint) and spawns `LAUNCHER -n WORLD <this cleave> train PLAN.json`, waits for it and reads the
// run's metrics.jsonl: the plan's measured step is the median step time after the first
// kTrialWarmupSteps. LAUNCHER is --launcher (words split at spaces), by default `mpiexec`, plus
// `--oversubscribe` when the world exceeds this machine's cores.
// Invariant: a plan that fails to train is reported with the last line of its log and ranked after every
// plan that measured; the trial's files live in a temporary directory removed afterwards.
#pragma once

#include <string>
#include <vector>

#include "engine/planner/plan_search.hpp"

namespace cleave::cli {

inline constexpr int kTrialWarmupSteps = 2;  // first steps not counted (allocation, first-touch pages)

struct TrialOptions {
  int world = 1;
  int plans = 0;        // K: the top K of the ranking
  int steps = 8;        // steps per plan, warm-up included (> kTrialWarmupSteps)
  std::string launcher; // "" = mpiexec (+ --oversubscribe when world > cores)
  std::int64_t memory_limit = 0;  // a cap given on the command line, carried into each trial's config
};

struct TrialResult {
  int predicted_rank = 0;            // 1-based place in the planner's ranking
  planner::PlanEstimate plan;
  bool measured = false;
  double measured_s = 0;             // median step after the warm-up
  std::string error;                 // why it did not measure (the log's last line)
};

// The launcher's argv for `world` ranks (before the program): --launcher split at spaces, or the default.
std::vector<std::string> trial_launcher(const std::string& launcher, int world);

// Trains the top options.plans plans of `ranked` (config file + overrides as the search read them) and returns
// them re-ranked: measured ones by measured step time, then the failed ones in predicted order. Throws Error
// when run under an MPI launcher or when no launcher can be started.
std::vector<TrialResult> run_trials(const std::string& config_path, const std::vector<std::string>& overrides,
                                    const std::vector<planner::PlanEstimate>& ranked, const TrialOptions& options);

}  // namespace cleave::cli
