// CountingCommunicator: a Communicator that forwards every op to another one and counts the all-reduces it
// forwards, per group name and dtype ("world/cp i64"), in a table it shares with the communicators split from it.
// Tests wrap the world in one and hand it to the trainer, so every group the grid splits off is counted too (the
// moe count exchange under context parallelism: one i64 all-reduce per moe block and micro-batch on "world/cp").
// It changes no value and no order: each op is the wrapped communicator's own. It also counts the communicators
// destroyed while still holding a host-wait counter (count_host_waits not cleared): the counter's owner must clear
// it, or destroy the communicator, before the counter goes (communicator.hpp).
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/dtype.hpp"
#include "support/forwarding_communicator.hpp"

namespace cleave::testing {

using AllReduceCounts = std::map<std::string, std::int64_t>;  // "<group name> <dtype>" -> all-reduces posted
// The key under which AllReduceCounts counts communicators destroyed while still holding a host-wait counter.
inline const std::string kDestroyedHoldingHostWaits = "destroyed holding a host-wait counter";

class CountingCommunicator final : public ForwardingCommunicator {
 public:
  // Wraps `inner` (not owned; it must outlive this one).
  explicit CountingCommunicator(comm::Communicator& inner)
      : ForwardingCommunicator(&inner), counts_(std::make_shared<AllReduceCounts>()) {}

  const AllReduceCounts& counts() const { return *counts_; }
  std::int64_t count(const std::string& key) const {
    const auto it = counts_->find(key);
    return it == counts_->end() ? 0 : it->second;
  }

  ~CountingCommunicator() override {
    if (host_waits_ != nullptr) ++(*counts_)[kDestroyedHoldingHostWaits];
  }
  void count_host_waits(ops::HostWaits* waits) override {
    host_waits_ = waits;
    ForwardingCommunicator::count_host_waits(waits);
  }

 protected:
  std::unique_ptr<comm::Communicator> split_impl(int color, int key, std::string name) override {
    // `name` is this group's name + "/" + the label; the wrapped communicator adds its own (the same) prefix.
    std::unique_ptr<comm::Communicator> part = ForwardingCommunicator::split_impl(color, key, std::move(name));
    if (part == nullptr) return nullptr;
    return std::unique_ptr<comm::Communicator>(new CountingCommunicator(std::move(part), counts_));
  }
  comm::WorkPtr all_reduce_impl(const Tensor& tensor, comm::ReduceOp op, const Stream& stream) override {
    ++(*counts_)[inner().name() + " " + std::string(dtype_name(tensor.dtype()))];
    return ForwardingCommunicator::all_reduce_impl(tensor, op, stream);
  }

 private:
  CountingCommunicator(std::unique_ptr<comm::Communicator> owned, std::shared_ptr<AllReduceCounts> counts)
      : ForwardingCommunicator(owned.get()), owned_(std::move(owned)), counts_(std::move(counts)) {}

  std::unique_ptr<comm::Communicator> owned_;  // a split's communicator; null for the wrapped world
  std::shared_ptr<AllReduceCounts> counts_;
  ops::HostWaits* host_waits_ = nullptr;  // the counter last handed to count_host_waits
};

}  // namespace cleave::testing
