// Internal: the work list of a multi-tensor update (adamw.cpp, sgd.cpp): every tensor cut into pieces of at most
// kMultiTensorPiece elements, so one OpenMP team shares the concatenated index space of all tensors evenly.
//
// Invariant: the pieces of a tensor cover [0, n) exactly once, in order, and every piece but a tensor's last starts
// and ends on a multiple of kMultiTensorPiece (a multiple of every vector width), so a vector never straddles two
// pieces and each element gets the same arithmetic as in the single-tensor kernel.
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

inline void append_pieces(std::vector<MultiTensorPiece>& pieces, int64_t tensor, int64_t n) {
  for (int64_t begin = 0; begin < n; begin += kMultiTensorPiece) {
    pieces.push_back({tensor, begin, std::min(n, begin + kMultiTensorPiece)});
  }
}

}  // namespace cleave::kernels::cpu::detail
