// What `cleave bench` writes: a summary table (stdout), bench.json and one self-contained bench.html (inline
// CSS and SVG, no scripts, fonts or images from anywhere: it opens offline). Per schedule: median step
// time, tokens/s, measured bubble (both definitions of docs/schedules.md, whole pipeline and per rank),
// the simulator's makespan and bubble for the measured per-action costs beside them, peak memory and
// pipeline P2P bytes per rank, and the predicted and measured timelines one above the other.
// Invariant: the three outputs print the same numbers (they all read the ScheduleRun values).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/bench/bench_machine.hpp"
#include "engine/bench/schedule_run.hpp"

namespace cleave::bench {

struct BenchSetup {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string layout;  // "tp=1 dp=1 pp=2 (world 2)"
  int steps = 0;
  int warmup = 0;
  BenchMachine machine;
};

// `skipped`: listed schedules the config cannot run, each printed with its reason after those that ran.
std::string summary_table(const BenchSetup& setup, const std::vector<ScheduleRun>& runs,
                          const std::vector<SkippedSchedule>& skipped);
nlohmann::json bench_json(const BenchSetup& setup, const std::vector<ScheduleRun>& runs,
                          const std::vector<SkippedSchedule>& skipped);
std::string bench_html(const BenchSetup& setup, const std::vector<ScheduleRun>& runs,
                       const std::vector<SkippedSchedule>& skipped);

}  // namespace cleave::bench
