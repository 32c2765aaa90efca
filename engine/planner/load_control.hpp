// `cleave profile`'s record of its own load (partition/load_check.hpp): the control compute (the probe GEMM, every
// rank at once) timed at the points the profile names, and the 1-minute load average at its start and its end.
// Invariant: a control is taken between the profile's sections, never inside one, and changes no measurement.
#pragma once

#include <string>

#include "engine/comm/communicator.hpp"
#include "engine/planner/probe_gemm.hpp"
#include "partition/load_check.hpp"

namespace cleave::planner {

// The 1-minute load average from a /proc/loadavg-format file; -1 when it cannot be read.
double read_loadavg(const std::string& path);

class LoadRecorder {
 public:
  // Reads the load average at `loadavg_path` now: the profile's start. `cores`: the node's; `own_threads`: the
  // profile's busy threads on it.
  LoadRecorder(std::string loadavg_path, int cores, int own_threads);
  // Every rank at once: one warm-up and 7 timed runs of the control; rank 0 keeps their median and fastest as `at`.
  void control(const std::string& at, comm::Communicator& comm);
  // Reads the load average again (the profile's end) and returns the record; `seconds`: the profile's length.
  partition::LoadCheck finish(double seconds);

 private:
  std::string loadavg_path_;
  partition::LoadCheck check_;
  ProbeGemm gemm_;
};

}  // namespace cleave::planner
