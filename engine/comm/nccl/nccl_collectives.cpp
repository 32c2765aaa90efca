// The NCCL backend's collectives (nccl_communicator.hpp describes the semantics): all_reduce and reduce_scatter by
// NCCL's own reductions, or in deterministic mode by the rank-ordered exchange and the ordered_reduce kernel;
// all_gather and broadcast moved as bytes. Each enqueues on the communicator's stream into a pooled NcclWork
// (nccl_work.hpp) whose details are values, formatted only for a report. Host tensors take the communicator's MPI
// mirror instead.
//
// Invariant: the deterministic path sums every element's n contributions in the canonical rank order of
// engine/core/sum_tree.hpp, so its result is bit-identical to the MPI backend's for the same inputs.
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "engine/comm/host_reduce.hpp"
#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/comm/nccl/nccl_communicator.hpp"
#include "engine/comm/nccl/nccl_group.hpp"
#include "engine/comm/nccl/nccl_work.hpp"
#include "engine/comm/nccl/ordered_reduce.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::comm {
namespace detail {
namespace {

// Rank-ordered reduction of `count` elements of `input` (n blocks [block_begin(q), block_begin(q+1)) when
// `gather` is true, else n equal blocks of `count`) into `out`, all enqueued on the comm stream. With
// gather = true (all_reduce) the results are spread back into every rank's `input` afterwards.
void deterministic_reduce(NcclCommState& s, const char* op_name, DType dtype, ReduceOp op, char* input,
                          std::int64_t total, char* out, bool gather) {
  const int n = s.size;
  const int r = s.rank;
  const std::size_t elem = dtype_size(dtype);
  auto begin_of = [&](int q) { return gather ? block_begin(total, n, q) : total / n * q; };
  auto len_of = [&](int q) { return gather ? block_begin(total, n, q + 1) - block_begin(total, n, q) : total / n; };
  const std::int64_t mine = len_of(r);
  // The communicator's scratch, ordered on its stream: the previous reduction's kernel has read it before this
  // one's copy and receives write it. It grows only for a larger request (the warm-up's), so a steady step
  // allocates nothing; a throw below leaves it with the communicator, which frees it at its end.
  const std::size_t slot_bytes = static_cast<std::size_t>(mine) * elem;
  char* slots = s.staging.reserve(static_cast<std::size_t>(n) * slot_bytes, s.stream);
  if (mine > 0) {
    CLEAVE_CUDA_CHECK(cudaMemcpyAsync(slots + static_cast<std::size_t>(r) * slot_bytes,
                                      input + static_cast<std::size_t>(begin_of(r)) * elem, slot_bytes,
                                      cudaMemcpyDeviceToDevice, s.stream));
  }
  NcclGroup exchange;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    if (len_of(q) > 0) {
      CLEAVE_NCCL_CHECK(ncclSend(input + static_cast<std::size_t>(begin_of(q)) * elem,
                                 static_cast<std::size_t>(len_of(q)), nccl_type(dtype), q, s.comm, s.stream));
    }
    if (mine > 0) {
      CLEAVE_NCCL_CHECK(ncclRecv(slots + static_cast<std::size_t>(q) * slot_bytes, static_cast<std::size_t>(mine),
                                 nccl_type(dtype), q, s.comm, s.stream));
    }
  }
  exchange.end();
  s.wait_ready(s.comm, op_name);
  char* target = gather ? input + static_cast<std::size_t>(begin_of(r)) * elem : out;
  CLEAVE_CUDA_CHECK(ordered_reduce_on_device(dtype, op == ReduceOp::kMax, slots, n, mine, target, mine, s.stream));
  if (gather) {
    NcclGroup spread;
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      if (mine > 0) {
        CLEAVE_NCCL_CHECK(ncclSend(target, static_cast<std::size_t>(mine), nccl_type(dtype), q, s.comm, s.stream));
      }
      if (len_of(q) > 0) {
        CLEAVE_NCCL_CHECK(ncclRecv(input + static_cast<std::size_t>(begin_of(q)) * elem,
                                   static_cast<std::size_t>(len_of(q)), nccl_type(dtype), q, s.comm, s.stream));
      }
    }
    spread.end();
    s.wait_ready(s.comm, op_name);
  }
}

}  // namespace
}  // namespace detail

using detail::NcclCommState;
using detail::NcclWork;

// Host control tensors (the trainer's loss sums, metadata, counters) travel over the MPI mirror: it has the same
// members with the same ranks (s.rank = s.mpi->rank(), splits mirrored with the same color and key), and NCCL
// carries only device tensors. A collective mixing a host and a device tensor is still refused by check_device.
WorkPtr NcclCommunicator::all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  state_->surface();
  if (tensor.device().is_cpu()) return state_->mpi->all_reduce(tensor, op);
  check_device(tensor, "all_reduce");
  CLEAVE_CHECK(detail::has_nccl_type(tensor.dtype()),
               "{}: NCCL has no {} type to reduce (cast to i32, or reduce on the CPU with the mpi backend)",
               where("all_reduce"), dtype_name(tensor.dtype()));
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  NcclWork::Ptr work = NcclWork::take(state_, "all_reduce", stream);
  work->details().set(detail::NcclOpDetails::Form::kReduce, tensor, op);
  work->keep(tensor);
  if (s.options.deterministic && is_floating(tensor.dtype()) && s.size > 1) {
    detail::deterministic_reduce(s, "all_reduce", tensor.dtype(), op, detail::bytes(tensor), tensor.numel(), nullptr,
                                 true);
  } else {
    CLEAVE_NCCL_CHECK(ncclAllReduce(tensor.raw_data(), tensor.raw_data(), static_cast<std::size_t>(tensor.numel()),
                                    detail::nccl_type(tensor.dtype()), detail::nccl_op(op), s.comm, s.stream));
    s.wait_ready(s.comm, "all_reduce");
  }
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                              const Stream& stream) {
  state_->surface();
  if (input.device().is_cpu() && output.device().is_cpu()) return state_->mpi->reduce_scatter(input, output, op);
  check_device(input, "reduce_scatter");
  check_device(output, "reduce_scatter");
  CLEAVE_CHECK(detail::has_nccl_type(input.dtype()),
               "{}: NCCL has no {} type to reduce (cast to i32, or reduce on the CPU with the mpi backend)",
               where("reduce_scatter"), dtype_name(input.dtype()));
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  NcclWork::Ptr work = NcclWork::take(state_, "reduce_scatter", stream);
  work->details().set(detail::NcclOpDetails::Form::kReducePerRank, output, op);
  work->keep(input);
  work->keep(output);
  if (s.options.deterministic && is_floating(input.dtype()) && s.size > 1) {
    detail::deterministic_reduce(s, "reduce_scatter", input.dtype(), op, detail::bytes(input), input.numel(),
                                 detail::bytes(output), false);
  } else {
    // NCCL's in-place form is exactly ours: output == input + rank * count.
    CLEAVE_NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(), static_cast<std::size_t>(output.numel()),
                                        detail::nccl_type(input.dtype()), detail::nccl_op(op), s.comm, s.stream));
    s.wait_ready(s.comm, "reduce_scatter");
  }
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) {
  state_->surface();
  if (input.device().is_cpu() && output.device().is_cpu()) return state_->mpi->all_gather(input, output);
  check_device(input, "all_gather");
  check_device(output, "all_gather");
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  NcclWork::Ptr work = NcclWork::take(state_, "all_gather", stream);
  work->details().set(detail::NcclOpDetails::Form::kPerRank, input);
  work->keep(input);
  work->keep(output);
  // Moved as bytes (u16 has no NCCL type); in place when input == output + rank * count, as NCCL allows.
  CLEAVE_NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclInt8, s.comm, s.stream));
  s.wait_ready(s.comm, "all_gather");
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::broadcast_impl(const Tensor& tensor, int root, const Stream& stream) {
  state_->surface();
  if (tensor.device().is_cpu()) return state_->mpi->broadcast(tensor, root);
  check_device(tensor, "broadcast");
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  NcclWork::Ptr work = NcclWork::take(state_, "broadcast", stream);
  work->details().set(detail::NcclOpDetails::Form::kRoot, tensor, ReduceOp::kSum, root);
  work->keep(tensor);
  CLEAVE_NCCL_CHECK(
      ncclBroadcast(tensor.raw_data(), tensor.raw_data(), tensor.nbytes(), ncclInt8, root, s.comm, s.stream));
  s.wait_ready(s.comm, "broadcast");
  work->enqueued();
  return work;
}

}  // namespace cleave::comm
