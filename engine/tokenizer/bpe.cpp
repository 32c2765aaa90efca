// BPE merging (see bpe.hpp). The queue is a binary min-heap on (rank, position); entries made stale by an
// earlier merge are skipped when popped, as in `tokenizers`' Word::merge_all.
#include "engine/tokenizer/bpe.hpp"

#include <algorithm>

namespace cleave::tokenizer {

void BpeMerges::merge_word(std::string_view word, Scratch& scratch, std::vector<std::int32_t>& out) const {
  auto& symbols = scratch.symbols;
  auto& queue = scratch.queue;
  symbols.clear();
  queue.clear();
  const auto n = static_cast<std::int32_t>(word.size());
  for (std::int32_t i = 0; i < n; ++i) {
    symbols.push_back({byte_ids_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, 1});
  }
  merge_symbols(scratch, out);
}

void BpeMerges::merge_symbols(Scratch& scratch, std::vector<std::int32_t>& out) const {
  auto& symbols = scratch.symbols;
  auto& queue = scratch.queue;
  queue.clear();
  const auto n = static_cast<std::int32_t>(symbols.size());
  // std heap functions keep the largest first: "later" means a higher rank, then a later position.
  const auto later = [](const Scratch::Candidate& a, const Scratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  const auto push = [&](std::int32_t pos) {
    const std::int32_t next = symbols[pos].next;
    if (const MergeResult* m = find(symbols[pos].id, symbols[next].id)) {
      queue.push_back({m->rank, static_cast<std::uint32_t>(pos), m->new_id});
      std::push_heap(queue.begin(), queue.end(), later);
    }
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const Scratch::Candidate top = queue.back();
    queue.pop_back();
    auto& left = symbols[top.pos];
    if (left.bytes == 0 || left.next < 0) continue;
    const std::int32_t right_pos = left.next;
    const MergeResult* m = find(left.id, symbols[right_pos].id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale: a neighbour changed since it was queued
    auto& right = symbols[right_pos];
    left.id = top.new_id;
    left.bytes += right.bytes;
    left.next = right.next;
    right.bytes = 0;
    if (left.next >= 0) symbols[left.next].prev = static_cast<std::int32_t>(top.pos);
    if (left.prev >= 0) push(left.prev);
    if (left.next >= 0) push(static_cast<std::int32_t>(top.pos));
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace cleave::tokenizer
