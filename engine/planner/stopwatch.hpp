// The profile's one clock: seconds since a steady_clock time point, for every timing `cleave profile` takes (block
// passes, expert rows, host routing, the sync-wait and time-sharing probes). Invariant: monotonic (steady_clock), so
// a timed interval is never negative.
#pragma once

#include <chrono>

namespace cleave::planner {

using ProfileClock = std::chrono::steady_clock;

inline double seconds_since(ProfileClock::time_point start) {
  return std::chrono::duration<double>(ProfileClock::now() - start).count();
}

}  // namespace cleave::planner
