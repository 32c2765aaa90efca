// The index ranges of the memory-efficient attention kernels (flash_attention.cu) as host/device functions, so a
// CPU test (tests/unit/cuda/flash_ranges_test.cpp) checks them by brute force against the visibility rule.
//
// Visibility (docs/ops.md "Attention"): query row i (global position pi = q_offset + i) sees local key j (global
// position pj = k_offset + j) iff (not causal or pj <= pi) and (window <= 0 or pi - pj < window).
// Invariants the kernels rely on:
//  - flash_key_lo / flash_key_hi: the keys position pi sees are exactly [lo, hi) (none when lo >= hi), and both are
//    nondecreasing in pi, so the keys of rows [first, last] lie in flash_key_tiles(first, last) = [lo(first),
//    hi(last)): the forward's and dQ's tile loop, whose bound is then the same for every warp of the block;
//  - flash_query_rows_of_keys: every query row that sees a key of [kb, ke) lies in the returned rows (the dK/dV
//    kernel's row loop, the same for every warp of the block).
// All arithmetic is int64: positions at long context (offsets of 2^20 and more, B·H·T·D past 2^31) do not wrap.
#pragma once

#include <cstdint>

#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/floats.hpp"  // CLEAVE_HOST_DEVICE

namespace cleave::kernels::cuda {

struct FlashIndexRange {
  int64_t begin = 0, end = 0;  // [begin, end)
};

CLEAVE_HOST_DEVICE inline int64_t flash_clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// One past the last key position pi sees (local index).
CLEAVE_HOST_DEVICE inline int64_t flash_key_hi(const FlashAttentionShape& s, int64_t pi) {
  return s.causal ? flash_clamp(pi - s.k_offset + 1, 0, s.kv_len) : s.kv_len;
}
// The first key position pi sees (local index).
CLEAVE_HOST_DEVICE inline int64_t flash_key_lo(const FlashAttentionShape& s, int64_t pi) {
  return s.window > 0 ? flash_clamp(pi - s.window + 1 - s.k_offset, 0, s.kv_len) : 0;
}

// The keys any of the query rows [first, last] (local indices, first <= last) sees.
CLEAVE_HOST_DEVICE inline FlashIndexRange flash_key_tiles(const FlashAttentionShape& s, int64_t first, int64_t last) {
  return {flash_key_lo(s, s.q_offset + first), flash_key_hi(s, s.q_offset + last)};
}

// The query rows (local indices) that may see a key of [kb, ke) (0 <= kb < ke <= kv_len).
CLEAVE_HOST_DEVICE inline FlashIndexRange flash_query_rows_of_keys(const FlashAttentionShape& s, int64_t kb,
                                                                   int64_t ke) {
  const int64_t begin = s.causal ? s.k_offset + kb - s.q_offset : 0;
  const int64_t end = s.window > 0 ? s.k_offset + ke - 1 + s.window - s.q_offset : s.q_len;
  return {flash_clamp(begin, 0, s.q_len), flash_clamp(end, 0, s.q_len)};
}

}  // namespace cleave::kernels::cuda
