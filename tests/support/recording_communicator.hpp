// RecordingCommunicator: a Communicator that forwards every op to another one and records each collective it
// forwards (all-reduce, reduce-scatter, all-gather) as the cost model names them, partition::TpCollective: the op and
// the bytes of the whole tensor (an all-reduce's tensor, a reduce-scatter's input, an all-gather's output), in the
// order posted. Tests hand it to layers as their tp group and compare the record with what the cost model prices
// (support/tp_collectives.hpp). It changes no value and no order: each op is the wrapped communicator's own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/error.hpp"
#include "support/forwarding_communicator.hpp"
#include "partition/cost_model.hpp"

namespace cleave::testing {

class RecordingCommunicator final : public ForwardingCommunicator {
 public:
  // Wraps `inner` (not owned; it must outlive this one).
  explicit RecordingCommunicator(comm::Communicator& inner) : ForwardingCommunicator(&inner) {}

  // The collectives posted since the last take(), and a fresh record.
  std::vector<partition::TpCollective> take() { return std::exchange(posted_, {}); }

 protected:
  std::unique_ptr<comm::Communicator> split_impl(int, int, std::string) override {
    CLEAVE_THROW("RecordingCommunicator: a layer asked to split its tensor-parallel group");
  }
  comm::WorkPtr all_reduce_impl(const Tensor& tensor, comm::ReduceOp op, const Stream& stream) override {
    posted_.push_back({partition::Collective::kAllReduce, static_cast<std::int64_t>(tensor.nbytes())});
    return ForwardingCommunicator::all_reduce_impl(tensor, op, stream);
  }
  comm::WorkPtr reduce_scatter_impl(const Tensor& input, const Tensor& output, comm::ReduceOp op,
                                    const Stream& stream) override {
    posted_.push_back({partition::Collective::kReduceScatter, static_cast<std::int64_t>(input.nbytes())});
    return ForwardingCommunicator::reduce_scatter_impl(input, output, op, stream);
  }
  comm::WorkPtr all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) override {
    posted_.push_back({partition::Collective::kAllGather, static_cast<std::int64_t>(output.nbytes())});
    return ForwardingCommunicator::all_gather_impl(input, output, stream);
  }

 private:
  std::vector<partition::TpCollective> posted_;
};

}  // namespace cleave::testing
