// RecordingCommunicator: a Communicator that forwards every op to another one and records each collective it
// forwards (all-reduce, reduce-scatter, all-gather) as the cost model names them, partition::TpCollective: the op and
// the bytes of the whole tensor (an all-reduce's tensor, a reduce-scatter's input, an all-gather's output), in the
// order posted. Tests hand it to layers as their tp group and compare the record with what the cost model prices
// (support/tp_collectives.hpp). It changes no value and no order: each op is the wrapped communicator's own.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/error.hpp"
#include "partition/cost_model.hpp"

namespace cleave::testing {

class RecordingCommunicator final : public comm::Communicator {
 public:
  // Wraps `inner` (not owned; it must outlive this one).
  explicit RecordingCommunicator(comm::Communicator& inner) : inner_(&inner) {}

  // The collectives posted since the last take(), and a fresh record.
  std::vector<partition::TpCollective> take() { return std::exchange(posted_, {}); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view backend() const override { return inner_->backend(); }
  const std::string& name() const override { return inner_->name(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  const comm::CommOptions& options() const override { return inner_->options(); }
  bool sends_progress_on_their_own() const override { return inner_->sends_progress_on_their_own(); }
  [[noreturn]] void abort(const std::string& reason) override {
    inner_->abort(reason);
    std::abort();  // not reached: the wrapped abort does not return
  }
  void count_host_waits(ops::HostWaits* waits) override { inner_->count_host_waits(waits); }

 protected:
  std::unique_ptr<comm::Communicator> split_impl(int, int, std::string) override {
    CLEAVE_THROW("RecordingCommunicator: a layer asked to split its tensor-parallel group");
  }
  comm::WorkPtr all_reduce_impl(const Tensor& tensor, comm::ReduceOp op, const Stream& stream) override {
    posted_.push_back({partition::TpCollectiveOp::kAllReduce, static_cast<std::int64_t>(tensor.nbytes())});
    return inner_->all_reduce(tensor, op, stream);
  }
  comm::WorkPtr reduce_scatter_impl(const Tensor& input, const Tensor& output, comm::ReduceOp op,
                                    const Stream& stream) override {
    posted_.push_back({partition::TpCollectiveOp::kReduceScatter, static_cast<std::int64_t>(input.nbytes())});
    return inner_->reduce_scatter(input, output, op, stream);
  }
  comm::WorkPtr all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) override {
    posted_.push_back({partition::TpCollectiveOp::kAllGather, static_cast<std::int64_t>(output.nbytes())});
    return inner_->all_gather(input, output, stream);
  }
  comm::WorkPtr broadcast_impl(const Tensor& tensor, int root, const Stream& stream) override {
    return inner_->broadcast(tensor, root, stream);
  }
  comm::WorkPtr barrier_impl(const Stream& stream) override { return inner_->barrier(stream); }
  comm::WorkPtr batch_p2p_impl(std::span<const comm::P2POp> ops, const Stream& stream) override {
    return inner_->batch_p2p(ops, stream);
  }

 private:
  comm::Communicator* inner_;
  std::vector<partition::TpCollective> posted_;
};

}  // namespace cleave::testing
