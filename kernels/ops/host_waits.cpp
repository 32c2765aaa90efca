// The run's host-wait counter (host_waits.hpp).
#include "kernels/ops/host_waits.hpp"

namespace cleave::ops {

const char* host_wait_name(HostWait kind) {
  switch (kind) {
    case HostWait::kSynchronize:
      return "synchronize";
    case HostWait::kSumSquares:
      return "sum_squares";
    case HostWait::kSumSquaresMany:
      return "sum_squares_many";
    case HostWait::kCountCorrect:
      return "count_correct";
    case HostWait::kDeviceStatus:
      return "check_device_status";
    case HostWait::kCommunication:
      return "communication";
  }
  return "unknown";
}

std::int64_t HostWaits::total() const {
  std::int64_t sum = 0;
  for (std::int64_t c : counts_) sum += c;
  return sum;
}

HostWaits HostWaits::since(const HostWaits& earlier) const {
  HostWaits d;
  for (std::size_t k = 0; k < kHostWaitKinds; ++k) d.counts_[k] = counts_[k] - earlier.counts_[k];
  return d;
}

std::string HostWaits::str() const {
  std::string kinds;
  for (std::size_t k = 0; k < kHostWaitKinds; ++k) {
    if (counts_[k] == 0) continue;
    kinds += (kinds.empty() ? "" : ", ") + std::string(host_wait_name(static_cast<HostWait>(k))) + " " +
             std::to_string(counts_[k]);
  }
  return std::to_string(total()) + (kinds.empty() ? "" : " (" + kinds + ")");
}

}  // namespace cleave::ops
