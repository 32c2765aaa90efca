// A profile's record of its own load (file key "load_check"): a fixed control compute timed at the profile's start,
// between its sections and at its end, and the 1-minute load average at its start and end against the cores it saw;
// and the pure judgement whether the machine's speed moved while it measured (judge_load), from those figures alone.
// Invariant: prices never read it: a profile prices the same with or without it (it only says whether to trust them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::partition {

struct LoadCheck {
  // One timing of the control (the probe GEMM, engine/planner/probe_gemm.hpp, every rank at once as in training):
  // where in the profile it was taken, the median and fastest of its samples (rank 0's).
  struct Control {
    std::string at;
    double median_s = 0, min_s = 0;
  };
  std::vector<Control> controls;  // in the order taken: "start", ..., "end"
  double loadavg_start = -1, loadavg_end = -1;  // /proc/loadavg's 1-minute figure; -1: unreadable
  int cores = 0;                 // the cores the profile saw on its node
  int own_threads = 0;           // the profile's own busy threads on the node (ranks x threads per rank)
  double seconds = 0;            // the profile's length (its own share of loadavg_end grows with it)
};

// What judge_load saw and concluded.
struct LoadVerdict {
  bool disturbed = false;
  double drift = 0;          // the slowest control's median over the fastest's, - 1: the speed moved by this much
  double spread = 0;         // the worst control's median over its own fastest sample, - 1: load within one timing
  double others_start = 0;   // load average per core at the start (before the profile's own threads weigh in)
  double others_end = 0;     // at the end, less the profile's own threads' expected share of the 1-minute average
  std::string what;          // the reasons, with their numbers ("" when not disturbed)
};

// The thresholds (docs/planner.md, "Is the profile disturbed?"; recorded profiles under load moved their control
// 29% and 179%: RESULTS-2026-12-01-r-profileload).
inline constexpr double kDriftLimit = 0.15;       // the control's speed moved by more than this between sections
inline constexpr double kSpreadLimit = 0.25;      // one control's samples spread by more than this
// Others kept more than half of every core busy: flags only with a control that moved over kDriftLimit / 3 (the
// load average lags by a minute).
inline constexpr double kOthersPerCore = 0.5;

LoadVerdict judge_load(const LoadCheck& check);
// The one line `cleave plan` / `cleave simulate` print about a profile flagged disturbed (nullopt: not flagged or no
// record, as in profiles written before the check).
std::optional<std::string> load_warning(const std::optional<LoadCheck>& check, const std::string& profile_name);

nlohmann::json load_check_to_json(const LoadCheck& check);
LoadCheck load_check_from_json(const nlohmann::json& node, const std::string& where);

}  // namespace cleave::partition
