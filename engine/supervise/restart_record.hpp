// What `cleave run` records about a supervised job: every attempt (its world, layout, command, outcome) and every
// restart (when, which rank, why, the old and new layout, the checkpoint, the steps redone, the seconds lost and the
// recovery time split into detection, teardown, start-up, checkpoint load and first step), written as
// <train.out_dir>/supervisor/supervisor.json after every attempt and, when the job ends with a run.json, merged into
// it as "restarts". metrics.jsonl carries each restart on the first row after it (restart, restart_startup_s,
// restart_load_s, restart_first_step_s, written by the trainer from the restart record file, trainer.hpp).
//
// Definitions (seconds): detection = from the fault (the fault-injection line's arrival, else the end of the last
// completed step, i.e. metrics.jsonl's last write) to the first line naming the failure; teardown = from there until
// no process of the job is left; start-up = from the new launch until the trainer begins to load the checkpoint;
// load; first step = the first step after the restart; redone = the time the steps after the checkpoint had taken
// before the failure. seconds_lost = redone + detection + teardown + start-up + load + first step.
// Invariant: files are replaced atomically (temporary file + rename); run.json keeps every key the trainer wrote.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/supervise/recovery_policy.hpp"

namespace cleave::supervise {

struct AttemptRecord {
  int number = 0;        // 1-based
  int world = 0;
  std::string layout;    // "tp1 pp2 dp2, micro 2 x accum 2, 1f1b"
  std::vector<std::string> command;
  double started_unix_s = 0, ended_unix_s = 0;
  int exit_code = -1;
  std::string outcome;   // "completed", "failed: ...", "stopped on SIGTERM ..."
  std::string log;       // the attempt's output file
};

struct RestartRecord {
  int number = 0;  // 1-based
  double at_unix_s = 0;  // the failure's detection
  std::vector<int> failed_ranks;
  std::string kind;  // failure_kind_name
  std::string why;
  std::vector<std::string> dropped_slots;  // "host:index"
  std::string old_layout, new_layout;
  int old_world = 0, new_world = 0;
  std::string layout_choice;  // "kept tp x cp x pp (--keep-layout)" or "planner's best ..."
  std::string checkpoint;     // "" = none: restarted from step 0
  std::int64_t resumed_at_step = 0, last_step_done = 0, steps_redone = 0;
  double redone_s = 0, detection_s = 0, teardown_s = 0;
  std::optional<double> startup_s, load_s, first_step_s;  // from the metrics row, once the restart's first step ran
  double seconds_lost() const;
};

struct SupervisorRecord {
  std::vector<Slot> slots;
  std::vector<AttemptRecord> attempts;
  std::vector<RestartRecord> restarts;
  std::string outcome;  // "running", "completed", "failed: ...", "stopped on SIGTERM"
};

nlohmann::ordered_json restart_json(const RestartRecord& r);
std::string supervisor_json_text(const SupervisorRecord& record);
// Writes `text` to `path` through a temporary file and a rename.
void replace_file(const std::string& path, const std::string& text);
// Adds "restarts" (the record's) to an existing run.json; false when there is none.
bool merge_restarts_into_run_json(const std::string& run_json, const SupervisorRecord& record);

// What a metrics.jsonl says about a failed attempt: the last step done and each row's step time.
struct MetricsRows {
  std::int64_t last_step = 0;
  std::vector<std::pair<std::int64_t, double>> step_ms;  // (step, ms) per row
  double ms_after(std::int64_t step) const;              // the summed step time of the rows after `step`
  double mean_step_s() const;                            // 0 without rows
};
MetricsRows read_metrics_rows(const std::string& path);  // a missing file = no rows; a bad line is skipped
// Fills the start-up, load and first-step times of `r` from the row whose "restart" is r.number; false if none yet.
bool fill_phase_times(RestartRecord& r, const std::string& metrics_path);
// The step the restarted job resumed from ("resumed_at_step" on the row whose "restart" is r.number) when it is not
// the one `r` states: the trainer skipped a damaged checkpoint the supervisor's quick check had passed (a flipped
// bit inside tensor data, engine/checkpoint/quick_check.hpp). Nothing when they agree or there is no such row.
std::optional<std::int64_t> resumed_elsewhere(const RestartRecord& r, const std::string& metrics_path);

}  // namespace cleave::supervise
