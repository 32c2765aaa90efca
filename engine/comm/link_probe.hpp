// Link probe: times point-to-point messages between rank pairs (0,1), (2,3), ... of a communicator, all pairs
// at once, as a ping-pong (one way = half a round trip), for the planner's profiles (`cleave profile`) and the
// schedule bench's prediction (`cleave bench`), which fit latency + bytes / bandwidth to the points.
// Invariant: collective over the communicator (every rank takes part in the same calls, an odd last rank sits
// the exchanges out but joins the reductions); returns the same points on every rank: per size, the slowest
// pair's median one-way time.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace cleave::comm {

// (bytes, seconds) per size in `sizes` (bytes, multiples of 4), after one warm-up exchange each.
std::vector<std::pair<double, double>> time_ping_pong(Communicator& comm, const std::vector<std::int64_t>& sizes,
                                                      int repeats);

}  // namespace cleave::comm
