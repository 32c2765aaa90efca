// The MPI backend's collectives (mpi_communicator.hpp describes the protocols): all_reduce and reduce_scatter by
// the rank-ordered point-to-point protocol for floating types (MPI's own reductions for integers), all_gather
// point-to-point, broadcast by MPI_Ibcast. Each posts non-blocking calls into an MpiWork (mpi_work.hpp).
//
// Why point-to-point for the deterministic protocol: continuations run whenever the caller tests or waits,
// which can differ between ranks. A second-phase *collective* could then be posted in different orders on
// different ranks when several Works are in flight, which MPI forbids; tagged point-to-point messages on a
// private duplicate communicator match regardless of posting order.
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/mpi/mpi_work.hpp"

namespace cleave::comm {

using detail::MpiCommState;
using detail::MpiWork;

namespace {

// Floating types, rank-ordered: phase 0 sends block q of every rank to rank q; phase 1 (the continuation) reduces
// rank q's block in rank order and sends the result to everyone.
void post_rank_ordered_all_reduce(const std::shared_ptr<MpiCommState>& state, MpiWork& work, const Tensor& tensor,
                                  ReduceOp op) {
  MpiCommState& s = *state;
  const DType dtype = tensor.dtype();
  const std::int64_t count = tensor.numel();
  const int n = s.size;
  const int r = s.rank;
  const std::int64_t mine_begin = detail::block_begin(count, n, r);
  const std::int64_t mine = detail::block_begin(count, n, r + 1) - mine_begin;
  const std::size_t elem = dtype_size(dtype);
  Tensor staging =
      Tensor::empty({static_cast<std::int64_t>(n) * mine}, dtype, MemoryCategory::kCommunication, cpu_allocator());
  work.keep(staging);
  const std::uint64_t seq = s.next_seq++;
  char* data = detail::bytes(tensor);
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    work.post_p2p(false, detail::bytes(staging) + static_cast<std::size_t>(q * mine) * elem, mine, dtype, q,
                  s.tag(seq, 0), s.internal, detail::phase_label(false, q, 0));
  }
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    const std::int64_t b = detail::block_begin(count, n, q);
    work.post_p2p(true, data + static_cast<std::size_t>(b) * elem, detail::block_begin(count, n, q + 1) - b, dtype,
                  q, s.tag(seq, 0), s.internal, detail::phase_label(true, q, 0));
  }
  work.then(
      [](MpiWork& w, const detail::ContinuationArgs& a) {
        MpiCommState& st = w.state();
        char* own = a.data + static_cast<std::size_t>(a.mine_begin) * a.elem;
        for (int q = 0; q < st.size; ++q) {
          st.reduce_slots[static_cast<std::size_t>(q)] =
              q == st.rank ? own : detail::bytes(a.staging) + static_cast<std::size_t>(q * a.mine) * a.elem;
        }
        ordered_reduce(a.dtype, a.op, st.reduce_slots, own, a.mine);
        for (int q = 0; q < st.size; ++q) {
          if (q == st.rank) continue;
          const std::int64_t b = detail::block_begin(a.count, st.size, q);
          w.post_p2p(false, a.data + static_cast<std::size_t>(b) * a.elem,
                     detail::block_begin(a.count, st.size, q + 1) - b, a.dtype, q, st.tag(a.seq, 1), st.internal,
                     detail::phase_label(false, q, 1));
        }
        for (int q = 0; q < st.size; ++q) {
          if (q == st.rank) continue;
          w.post_p2p(true, own, a.mine, a.dtype, q, st.tag(a.seq, 1), st.internal, detail::phase_label(true, q, 1));
        }
      },
      {.staging = staging, .data = data, .dtype = dtype, .op = op, .count = count, .mine = mine,
       .mine_begin = mine_begin, .seq = seq, .elem = elem});
}

// Integer types: MPI's own reduction, in place, in pieces of at most max_message_elements.
void post_native_all_reduce(const MpiCommState& s, MpiWork& work, const Tensor& tensor, ReduceOp op) {
  const DType dtype = tensor.dtype();
  const std::int64_t count = tensor.numel();
  const std::int64_t piece = s.options.max_message_elements;
  const std::size_t elem = dtype_size(dtype);
  for (std::int64_t begin = 0; begin < count; begin += piece) {
    MPI_Request request = MPI_REQUEST_NULL;
    CLEAVE_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, detail::bytes(tensor) + static_cast<std::size_t>(begin) * elem,
                                    static_cast<int>(std::min(piece, count - begin)), detail::mpi_type(dtype),
                                    detail::mpi_op(op), s.comm, &request));
    work.add(request);
  }
}

}  // namespace

WorkPtr MpiCommunicator::all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  (void)stream;
  check_cpu(tensor, "all_reduce");
  auto work = MpiWork::take(state_, "all_reduce");
  work->details("{} {}, {}", tensor.numel(), dtype_name(tensor.dtype()), reduce_op_name(op));
  work->keep(tensor);
  if (detail::rank_ordered(tensor.dtype())) post_rank_ordered_all_reduce(state_, *work, tensor, op);
  else post_native_all_reduce(*state_, *work, tensor, op);
  return work;
}

WorkPtr MpiCommunicator::reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                             const Stream& stream) {
  (void)stream;
  check_cpu(input, "reduce_scatter");
  check_cpu(output, "reduce_scatter");
  MpiCommState& s = *state_;
  const DType dtype = input.dtype();
  const std::int64_t count = output.numel();  // per rank
  const std::size_t elem = dtype_size(dtype);
  auto work = MpiWork::take(state_, "reduce_scatter");
  work->details("{} {} per rank, {}", output.numel(), dtype_name(output.dtype()), reduce_op_name(op));
  work->keep(input);
  work->keep(output);

  if (detail::rank_ordered(dtype)) {
    const int n = s.size;
    const int r = s.rank;
    Tensor staging =
        Tensor::empty({static_cast<std::int64_t>(n) * count}, dtype, MemoryCategory::kCommunication, cpu_allocator());
    work->keep(staging);
    const std::uint64_t seq = s.next_seq++;
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      work->post_p2p(false, detail::bytes(staging) + static_cast<std::size_t>(q * count) * elem, count, dtype, q,
                     s.tag(seq, 0), s.internal, detail::phase_label(false, q, 0));
    }
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      work->post_p2p(true, detail::bytes(input) + static_cast<std::size_t>(q * count) * elem, count, dtype, q,
                     s.tag(seq, 0), s.internal, detail::phase_label(true, q, 0));
    }
    work->then(
        [](MpiWork& w, const detail::ContinuationArgs& a) {
          MpiCommState& st = w.state();
          for (int q = 0; q < st.size; ++q) {
            const Tensor& from = q == st.rank ? a.input : a.staging;
            st.reduce_slots[static_cast<std::size_t>(q)] =
                detail::bytes(from) + static_cast<std::size_t>(q * a.count) * a.elem;
          }
          ordered_reduce(a.dtype, a.op, st.reduce_slots, a.output.raw_data(), a.count);
        },
        {.input = input, .output = output, .staging = staging, .dtype = dtype, .op = op, .count = count,
         .elem = elem});
    return work;
  }

  CLEAVE_CHECK(count <= s.options.max_message_elements,
               "{}: {} elements per rank exceed the {} an MPI call can carry; split the tensor into smaller "
               "reduce_scatter calls",
               where("reduce_scatter"), count, s.options.max_message_elements);
  // In place (output is the input's own block): MPI's MPI_IN_PLACE puts the result at the buffer's start,
  // not at block r, so receive into a temporary and copy.
  const bool in_place = tensors_overlap(input, output);
  Tensor target = in_place ? Tensor::empty({count}, dtype, MemoryCategory::kCommunication, cpu_allocator()) : output;
  work->keep(target);
  MPI_Request request = MPI_REQUEST_NULL;
  CLEAVE_MPI_CHECK(MPI_Ireduce_scatter_block(input.raw_data(), target.raw_data(), static_cast<int>(count),
                                             detail::mpi_type(dtype), detail::mpi_op(op), s.comm, &request));
  work->add(request);
  if (in_place) {
    work->then([](MpiWork&, const detail::ContinuationArgs& a) {
      std::memcpy(a.output.raw_data(), a.staging.raw_data(), a.output.nbytes());
    }, {.output = output, .staging = target});
  }
  return work;
}

WorkPtr MpiCommunicator::all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) {
  (void)stream;
  check_cpu(input, "all_gather");
  check_cpu(output, "all_gather");
  MpiCommState& s = *state_;
  const std::int64_t count = input.numel();
  const std::size_t elem = dtype_size(input.dtype());
  auto work = MpiWork::take(state_, "all_gather");
  work->details("{} {} per rank", input.numel(), dtype_name(input.dtype()));
  work->keep(input);
  work->keep(output);
  // Point-to-point, every rank's block straight to every other rank (the same bytes per rank as a ring, cut into
  // progress pieces): MPI_Iallgather took 84 ms for 64 MiB on 2 ranks where this takes 25 (comm_bench).
  char* own = detail::bytes(output) + static_cast<std::size_t>(s.rank * count) * elem;
  if (tensors_overlap(input, output)) {
    CLEAVE_CHECK(input.raw_data() == own, "{}: an in-place input must be this rank's block {} of the output",
                 where("all_gather"), s.rank);
  } else if (count > 0) {
    std::memcpy(own, input.raw_data(), input.nbytes());
  }
  const std::uint64_t seq = s.next_seq++;
  for (int q = 0; q < s.size; ++q) {
    if (q == s.rank) continue;
    work->post_p2p(false, detail::bytes(output) + static_cast<std::size_t>(q * count) * elem, count, input.dtype(), q,
                   s.tag(seq, 0), s.internal, detail::peer_label(false, q, s.tag(seq, 0)));
  }
  for (int q = 0; q < s.size; ++q) {
    if (q == s.rank) continue;
    work->post_p2p(true, own, count, input.dtype(), q, s.tag(seq, 0), s.internal,
                   detail::peer_label(true, q, s.tag(seq, 0)));
  }
  return work;
}

WorkPtr MpiCommunicator::broadcast_impl(const Tensor& tensor, int root, const Stream& stream) {
  (void)stream;
  check_cpu(tensor, "broadcast");
  MpiCommState& s = *state_;
  auto work = MpiWork::take(state_, "broadcast");
  work->details("{} {}, root rank {}", tensor.numel(), dtype_name(tensor.dtype()), root);
  work->keep(tensor);
  const std::int64_t count = tensor.numel();
  const std::int64_t piece = s.options.max_message_elements;
  const std::size_t elem = dtype_size(tensor.dtype());
  for (std::int64_t begin = 0; begin < count; begin += piece) {
    MPI_Request request = MPI_REQUEST_NULL;
    CLEAVE_MPI_CHECK(MPI_Ibcast(detail::bytes(tensor) + static_cast<std::size_t>(begin) * elem,
                                static_cast<int>(std::min(piece, count - begin)), detail::mpi_type(tensor.dtype()),
                                root, s.comm, &request));
    work->add(request);
  }
  return work;
}

}  // namespace cleave::comm
