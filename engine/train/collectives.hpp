// Typed host-side collectives the trainer needs between steps: gathering every rank's vector of plain
// values, and reducing a few doubles exactly. One helper replaces the ad hoc encodings (names as i32 bytes,
// doubles as i64 patterns, timelines as i64 rows) the trainer used to write by hand.
//
// Invariants: values travel as their bytes (exact, any trivially copyable T); every rank receives the same
// result; reductions combine the gathered values in rank order, so every rank gets the same double and a
// sum over one rank is the value itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace cleave::train {

// result[r] = rank r's bytes. Two all_gathers: the lengths, then the payloads padded to the longest.
std::vector<std::vector<std::byte>> all_gather_bytes(comm::Communicator& comm, std::span<const std::byte> mine);

// result[r] = rank r's values (lengths may differ between ranks). Collective.
template <typename T>
std::vector<std::vector<T>> all_gather_values(comm::Communicator& comm, std::span<const T> mine) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_values moves plain values as bytes");
  const auto gathered = all_gather_bytes(comm, std::as_bytes(mine));
  std::vector<std::vector<T>> out(gathered.size());
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    out[r].resize(gathered[r].size() / sizeof(T));
    if (!out[r].empty()) std::memcpy(out[r].data(), gathered[r].data(), out[r].size() * sizeof(T));
  }
  return out;
}

// Element-wise sum (or max) of `values` over the ranks, combined in rank order; every rank passes the same
// number of values. Collective.
std::vector<double> reduce_doubles(comm::Communicator& comm, const std::vector<double>& values, comm::ReduceOp op);
// The same into `out` (out.size() == values.size(); it may be `values` itself), for a caller that keeps its vector.
void reduce_doubles_into(comm::Communicator& comm, std::span<const double> values, std::span<double> out,
                         comm::ReduceOp op);

}  // namespace cleave::train
