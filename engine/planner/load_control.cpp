// The control compute and load-average reads of `cleave profile` (engine/planner/load_control.hpp).
#include "engine/planner/load_control.hpp"

#include <algorithm>
#include <fstream>
#include <utility>
#include <vector>

#include "engine/planner/median.hpp"

namespace cleave::planner {

namespace {
constexpr int kRuns = 7;           // timed runs per control
constexpr int kGemmsPerRun = 512;  // probe GEMMs per run: about 20 ms on a Zen 4 core, several scheduler slices
                                   // (a run of 16, 0.6 ms, fits in one slice and never saw a neighbour's load)
}  // namespace

double read_loadavg(const std::string& path) {
  std::ifstream in(path);
  double one_minute = -1;
  if (!(in >> one_minute) || one_minute < 0) return -1;
  return one_minute;
}

LoadRecorder::LoadRecorder(std::string loadavg_path, int cores, int own_threads)
    : loadavg_path_(std::move(loadavg_path)) {
  check_.cores = cores;
  check_.own_threads = own_threads;
  check_.loadavg_start = read_loadavg(loadavg_path_);
}

void LoadRecorder::control(const std::string& at, comm::Communicator& comm) {
  comm.barrier()->wait();
  gemm_.run(kGemmsPerRun);  // warm-up
  std::vector<double> runs;
  for (int i = 0; i < kRuns; ++i) runs.push_back(gemm_.run(kGemmsPerRun));
  comm.barrier()->wait();
  if (comm.rank() != 0) return;
  check_.controls.push_back({at, median(runs), *std::min_element(runs.begin(), runs.end())});
}

partition::LoadCheck LoadRecorder::finish(double seconds) {
  check_.loadavg_end = read_loadavg(loadavg_path_);
  check_.seconds = seconds;
  return check_;
}

}  // namespace cleave::planner
