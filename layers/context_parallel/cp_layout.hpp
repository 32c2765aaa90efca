// CpLayout: which tokens of each sequence a context-parallel rank holds, a small value type with no
// communication in it (docs/multi-rank.md#context-parallelism).
//
// A sequence of T tokens is split over `size` cp ranks, T / size tokens each, by the exchange:
//  - all_to_all (DeepSpeed-Ulysses): rank r holds the contiguous chunk r, global tokens [r·T/cp, (r+1)·T/cp);
//  - ring: the sequence is cut into 2·cp chunks of c = T / (2cp) and rank r holds chunks r and 2cp-1-r, in
//    that order, so every rank does the same causal attention work (the early chunk sees few keys, the late
//    one many).
// Invariant: the ranks' token sets partition [0, T), each rank's tokens are stored in increasing global
// position, and `segments` describes any local range as runs of consecutive global positions, which is what
// the position embeddings (learned and rotary) and the data sharding read.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace cleave::layers {

enum class CpExchange { kRing, kAllToAll };

// A run of local tokens [local_begin, local_begin + length) at global positions [global_begin, ...).
struct CpSegment {
  std::int64_t local_begin = 0;
  std::int64_t global_begin = 0;
  std::int64_t length = 0;
  friend bool operator==(const CpSegment&, const CpSegment&) = default;
};

// A rank's runs: at most two (ring: its two chunks), held in place so asking costs no allocation (the position
// embeddings ask per layer call).
class CpSegments {
 public:
  static constexpr std::size_t kMax = 2;
  void push_back(const CpSegment& s);
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const CpSegment& operator[](std::size_t i) const { return runs_[i]; }
  const CpSegment* begin() const { return runs_.data(); }
  const CpSegment* end() const { return runs_.data() + size_; }
  friend bool operator==(const CpSegments& a, const CpSegments& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  std::array<CpSegment, kMax> runs_{};
  std::size_t size_ = 0;
};

struct CpLayout {
  int size = 1;
  int rank = 0;
  CpExchange exchange = CpExchange::kRing;

  bool active() const { return size > 1; }
  // Chunks of the sequence a rank holds: 2 under ring (size > 1), else 1.
  int chunks_per_rank() const { return exchange == CpExchange::kRing && size > 1 ? 2 : 1; }
  // Global chunk index of this rank's k-th chunk (k < chunks_per_rank()), out of size · chunks_per_rank().
  int chunk_index(int k, int of_rank) const;
  // The runs of global positions of local tokens [first, first + count) of a rank holding `local_tokens`
  // tokens per sample (T / size). With size 1: one run starting at `first`.
  CpSegments segments(std::int64_t local_tokens, std::int64_t first, std::int64_t count) const;
  CpSegments segments(std::int64_t local_tokens) const { return segments(local_tokens, 0, local_tokens); }
  // The same for another rank of the group (the data sharding and the ring's block masks ask for peers).
  CpSegments segments_of(int of_rank, std::int64_t local_tokens) const;
};

}  // namespace cleave::layers
