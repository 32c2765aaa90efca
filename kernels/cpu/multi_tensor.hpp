// Internal: the work list of a multi-tensor kernel (adamw.cpp, sgd.cpp, elementwise.cpp's scale_inplace_many and
// sum_squares_exact_many): every tensor cut into pieces of at most `piece` elements (kMultiTensorPiece unless the
// kernel has its own chunk), so one OpenMP team shares the concatenated index space of all tensors evenly.
//
// Invariants: the pieces of a tensor cover [0, n) exactly once, in order, and every piece but a tensor's last starts
// and ends on a multiple of `piece` (kMultiTensorPiece is a multiple of every vector width), so a vector never
// straddles two pieces and each element gets the same arithmetic as in the single-tensor kernel. The list is walked,
// never stored: a call allocates nothing (the steady-state rule), and a thread finds its first piece by a pass over
// the tensors' sizes. Which thread runs a piece never changes a bit (the kernels' pieces are independent, or merged
// exactly).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu::detail {

// 64 KiB of floats per stream: large enough that the per-piece overhead is noise, small enough that a few hundred
// thousand parameters still split over two threads.
inline constexpr int64_t kMultiTensorPiece = int64_t{1} << 14;

// The pieces of `count` tensors, tensor t of size_of(t) elements.
template <typename SizeOf>
int64_t piece_count(int64_t count, const SizeOf& size_of, int64_t piece = kMultiTensorPiece) {
  int64_t pieces = 0;
  for (int64_t t = 0; t < count; ++t) pieces += (size_of(t) + piece - 1) / piece;
  return pieces;
}

// fn(tensor, begin, end) for pieces [first, last) of the concatenated list, in order.
template <typename SizeOf, typename Fn>
void walk_pieces(int64_t count, const SizeOf& size_of, int64_t piece, int64_t first, int64_t last, const Fn& fn) {
  int64_t index = 0;  // the list index of tensor t's first piece
  for (int64_t t = 0; t < count && index < last; ++t) {
    const int64_t n = size_of(t);
    const int64_t pieces = (n + piece - 1) / piece;
    for (int64_t p = std::max<int64_t>(0, first - index); p < pieces && index + p < last; ++p) {
      fn(t, p * piece, std::min(n, (p + 1) * piece));
    }
    index += pieces;
  }
}

// Every piece once: over the OpenMP team when `parallel` holds and no region is active (each thread a contiguous run
// of pieces), else in order on the calling thread.
template <typename SizeOf, typename Fn>
void for_each_piece(int64_t count, const SizeOf& size_of, bool parallel, const Fn& fn,
                    int64_t piece = kMultiTensorPiece) {
  const int64_t total = piece_count(count, size_of, piece);
  if (!parallel_here(parallel && total > 1)) {
    walk_pieces(count, size_of, piece, 0, total, fn);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    walk_pieces(count, size_of, piece, total * thread / threads, total * (thread + 1) / threads, fn);
  }
}

}  // namespace cleave::kernels::cpu::detail
