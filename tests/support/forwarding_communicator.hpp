// ForwardingCommunicator: a Communicator that hands every op to another one unchanged. Test communicators derive from
// it and override only what they observe (CountingCommunicator counts all-reduces, RecordingCommunicator records the
// collectives a layer posts); neither changes a value or an order. all_to_all_v keeps Communicator's own composition
// of batch_p2p, which is forwarded.
#pragma once

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace cleave::testing {

class ForwardingCommunicator : public comm::Communicator {
 public:
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
  // `inner` is not owned here; it must outlive this one.
  explicit ForwardingCommunicator(comm::Communicator* inner) : inner_(inner) {}
  comm::Communicator& inner() const { return *inner_; }

  std::unique_ptr<comm::Communicator> split_impl(int color, int key, std::string name) override {
    return inner_->split(color, key, name.substr(name.rfind('/') + 1));
  }
  comm::WorkPtr all_reduce_impl(const Tensor& tensor, comm::ReduceOp op, const Stream& stream) override {
    return inner_->all_reduce(tensor, op, stream);
  }
  comm::WorkPtr reduce_scatter_impl(const Tensor& input, const Tensor& output, comm::ReduceOp op,
                                    const Stream& stream) override {
    return inner_->reduce_scatter(input, output, op, stream);
  }
  comm::WorkPtr all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) override {
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
};

}  // namespace cleave::testing
