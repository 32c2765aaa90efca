// Internal: the work list of a multi-tensor kernel (adamw.cpp, sgd.cpp, elementwise.cpp's scale_inplace_many and
// sum_squares_exact_many): every tensor cut into pieces of at most `piece` elements (kMultiTensorPiece unless the
// kernel has its own chunk), so one OpenMP team shares the concatenated index space of all tensors evenly.
//
// Invariant: the pieces of a tensor cover [0, n) exactly once, in order, and every piece but a tensor's last starts
// and ends on a multiple of `piece` (kMultiTensorPiece is a multiple of every vector width), so a vector never
// straddles two pieces and each element gets the same arithmetic as in the single-tensor kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cleave::kernels::cpu::detail {

// 64 KiB of floats per stream: large enough that the per-piece overhead is noise, small enough that a few hundred
// thousand parameters still split over two threads.
inline constexpr int64_t kMultiTensorPiece = int64_t{1} << 14;

struct MultiTensorPiece {
  int64_t tensor;  // index into the caller's tensor list
  int64_t begin, end;
};

inline void append_pieces(std::vector<MultiTensorPiece>& pieces, int64_t tensor, int64_t n,
                          int64_t piece = kMultiTensorPiece) {
  for (int64_t begin = 0; begin < n; begin += piece) {
    pieces.push_back({tensor, begin, std::min(n, begin + piece)});
  }
}

}  // namespace cleave::kernels::cpu::detail
