// `cleave plan --trial K`: the planner checks itself. The top K plans are trained for a few real steps each, in
// interleaved rounds, and re-ranked only where the measurement is clearer than its own spread.
//
// How the steps run: `cleave plan` itself runs without MPI (Open MPI does not nest launchers: a process started
// by mpiexec cannot start another mpiexec job). For each plan it writes the plan's config once (the source config
// with the plan's keys set, `--trial-steps` steps, no evaluation, no report, no checkpoint), and each round spawns
// `LAUNCHER -n WORLD <this cleave> train PLAN.json --set train.out_dir=<fresh>` for every plan in turn
// (A B C A B C ...: a slow minute of a shared machine lands on every plan, not on one), waits for it and reads the
// run's metrics.jsonl: the round's figure for the plan is its median step after the first kTrialWarmupSteps.
// LAUNCHER is --launcher (words split at spaces), by default `mpiexec`, plus `--oversubscribe` when the world
// exceeds this machine's cores.
// Rounds stop when every plan has at least min(kTrialMinRounds, max_rounds) rounds and a spread (relative
// half-range of its round medians, engine/planner/plan_ranking.hpp) at most `spread_bound`, when `max_rounds` ran,
// or before a round that would end past `budget_s` (the last round's length is the estimate; the first round
// always runs). The re-ranking is planner::rank_measured.
// With measure_terms (`--explain`) each run also sets train.trace: its trace.json (the last step's timeline) is
// attributed term by term on the plan's busiest predicted pp rank (engine/planner/measured_step.hpp); a run whose
// trace cannot be read keeps its step time and adds no terms.
// Invariant: a plan that fails to train is reported with the last line of its log, runs no further rounds and is
// ranked after every plan that measured; the trial's files live in a temporary directory removed afterwards.
#pragma once

#include <string>
#include <vector>

#include "engine/planner/measured_step.hpp"
#include "engine/planner/plan_ranking.hpp"
#include "engine/planner/plan_search.hpp"

namespace cleave::cli {

inline constexpr int kTrialWarmupSteps = 2;  // first steps of each run not counted (allocation, first-touch pages)
inline constexpr int kTrialMinRounds = 3;    // rounds before a spread is trusted (two medians agree by chance)

struct TrialOptions {
  int world = 1;
  int steps = 8;              // steps per run, warm-up included (> kTrialWarmupSteps)
  int max_rounds = 5;         // --trial-rounds
  double spread_bound = 0.05; // --trial-spread: stop once every plan's spread is at most this
  double budget_s = 600;      // --trial-budget: no round is started that would end after it
  std::string launcher;       // "" = mpiexec (+ --oversubscribe when world > cores)
  std::int64_t memory_limit = 0;  // a cap given on the command line, carried into each trial's config
  bool measure_terms = false; // --explain: train.trace on, each run's last step attributed term by term
};

struct TrialResult {
  int predicted_place = 0;           // 1-based position in the order the plans were given (the predicted one)
  planner::PlanEstimate plan;
  std::vector<double> round_medians; // seconds, one per round it trained in
  planner::MeasuredPlan measured;    // median over rounds and spread
  int place = 0;                     // measured place (shared by plans whose ranges overlap)
  bool tied = false;
  std::string error;                 // why it did not measure (the log's last line)
  // With TrialOptions::measure_terms: each round's traced last step on the plan's busiest predicted pp rank
  // (planner::measure_step), and per field their median.
  std::vector<planner::MeasuredStep> round_steps;
  planner::MeasuredStep measured_step;
};

struct TrialOutcome {
  std::vector<TrialResult> ranked;   // in measured order (planner::rank_measured)
  int rounds = 0;                    // rounds run
  std::string stopped;               // why the rounds stopped: "every spread <= 5.0%", "the budget of 600 s", ...
};

// The launcher's argv for `world` ranks (before the program): --launcher split at spaces, or the default.
std::vector<std::string> trial_launcher(const std::string& launcher, int world);

// Trains `plans` (in predicted order; config file + overrides as the search read them) in interleaved rounds and
// returns them re-ranked, with a progress line per run on stderr. Throws Error when run under an MPI launcher or
// when no launcher can be started.
TrialOutcome run_trials(const std::string& config_path, const std::vector<std::string>& overrides,
                        const std::vector<planner::PlanEstimate>& plans, const TrialOptions& options);

}  // namespace cleave::cli
