// The staged backend's collectives (staged_communicator.hpp describes the staging): each copies its device inputs to
// pinned host buffers, has the host wait for them, posts the inner collective on the host buffers, and returns a
// StagedWork (staged_work.hpp) that copies the outputs back. CPU tensors go to the inner communicator unchanged.
// The Work comes from the resources' pool and the op fills its reused vectors: no heap allocation once warm.
//
// Invariant: the inner collective is posted inside the call, in issue order, so collectives match across ranks
// exactly as on the inner backend. (Posting it from a later test()/wait() would let ranks post collectives in
// different orders when several Works are in flight, which MPI forbids: hence the host blocks at issue.)
#include "engine/comm/cuda/staged_communicator.hpp"
#include "engine/comm/cuda/staged_work.hpp"
#include "engine/cuda/copy.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::comm {

using detail::StagedOp;
using detail::StagedWork;

WorkPtr StagedCommunicator::all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  if (tensor.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->all_reduce(tensor, op, cpu_stream());
  }
  const Stream copy_in = device_stream(tensor.device(), stream, "all_reduce");
  cuda::DeviceGuard guard(tensor.device().index);
  StagedWork::Ptr work = take_work("all_reduce", tensor.device());
  Tensor host = pinned_like(tensor);
  detail::copy_to_host_and_wait(host, tensor, copy_in, host_waits_);
  work->staged().copy_back.emplace_back(tensor, host);
  work->start(inner_->all_reduce(host, op, cpu_stream()));
  return work;
}

WorkPtr StagedCommunicator::reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                                const Stream& stream) {
  // input and output are on one device (checked by Communicator::reduce_scatter).
  if (input.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->reduce_scatter(input, output, op, cpu_stream());
  }
  const Stream copy_in = device_stream(input.device(), stream, "reduce_scatter");
  cuda::DeviceGuard guard(input.device().index);
  StagedWork::Ptr work = take_work("reduce_scatter", input.device());
  StagedOp& staged = work->staged();
  Tensor host_in = pinned_like(input);
  // In place stays in place: the host output is the host input's block r, as the device output is.
  Tensor host_out = tensors_overlap(input, output) ? detail::block_of(host_in, rank(), size(), output.shape())
                                                   : pinned_like(output);
  detail::copy_to_host_and_wait(host_in, input, copy_in, host_waits_);
  staged.keep.push_back(host_in);
  staged.copy_back.emplace_back(output, host_out);
  work->start(inner_->reduce_scatter(host_in, host_out, op, cpu_stream()));
  return work;
}

WorkPtr StagedCommunicator::all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) {
  if (input.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->all_gather(input, output, cpu_stream());
  }
  const Stream copy_in = device_stream(input.device(), stream, "all_gather");
  cuda::DeviceGuard guard(input.device().index);
  StagedWork::Ptr work = take_work("all_gather", input.device());
  // Gathered in place on the host whatever the device form: the input goes straight into its block r.
  Tensor host_out = pinned_like(output);
  Tensor host_in = detail::block_of(host_out, rank(), size(), input.shape());
  detail::copy_to_host_and_wait(host_in, input, copy_in, host_waits_);
  work->staged().copy_back.emplace_back(output, host_out);
  work->start(inner_->all_gather(host_in, host_out, cpu_stream()));
  return work;
}

WorkPtr StagedCommunicator::broadcast_impl(const Tensor& tensor, int root, const Stream& stream) {
  if (tensor.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->broadcast(tensor, root, cpu_stream());
  }
  const Stream order = device_stream(tensor.device(), stream, "broadcast");
  cuda::DeviceGuard guard(tensor.device().index);
  StagedWork::Ptr work = take_work("broadcast", tensor.device());
  StagedOp& staged = work->staged();
  Tensor host = pinned_like(tensor);
  if (rank() == root) {
    detail::copy_to_host_and_wait(host, tensor, order, host_waits_);
    staged.keep.push_back(host);
  } else {
    // Output only: no need to block the host; the copy back waits for the stream as it is now.
    detail::record_ready(staged, *resources_, order);
    staged.copy_back.emplace_back(tensor, host);
  }
  work->start(inner_->broadcast(host, root, cpu_stream()));
  return work;
}

}  // namespace cleave::comm
