// What every communication backend's ops share (mpi/, nccl/): a tensor's text in a Work's details, its bytes, and
// the cut of a reduction's elements into near-equal blocks, one per rank.
//
// Invariant: block_begin cuts the same count the same way on every rank (blocks differ in length by at most one
// element), so block q of every rank's tensor covers the same elements; rank-ordered reductions rely on it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/tensor.hpp"

namespace cleave::comm::detail {

// "N dtype" of a tensor, for a Work's details ("4096 f32").
inline std::string describe(const Tensor& t) { return fmt::format("{} {}", t.numel(), dtype_name(t.dtype())); }

inline char* bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// Block b of `count` elements cut into `n` near-equal blocks: [block_begin(b), block_begin(b + 1)).
inline std::int64_t block_begin(std::int64_t count, int n, int b) { return count * b / n; }

}  // namespace cleave::comm::detail
