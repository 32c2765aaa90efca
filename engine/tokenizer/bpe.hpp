// BPE merging within one pre-token word, exactly as Hugging Face `tokenizers` (models/bpe/word.rs) does it:
// the word starts as one symbol per byte (byte-level BPE) or per character, byte-fallback byte or unknown run
// (SentencePiece-style BPE, built by the caller with start_word/add_symbol); the pair with the lowest merge rank is merged first, the
// leftmost among equal ranks; each merge may create pairs with its neighbours, which join the queue.
//
// Invariant: BpeMerges is immutable once built; merge_word() is a pure function of the word (the scratch
// buffers it takes only avoid allocations). A merge (a, b) -> a+b has rank = its line in "merges"; a pair
// listed twice keeps the later rank (as `tokenizers` builds its map).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cleave::tokenizer {

struct MergeResult {
  std::uint32_t rank;
  std::int32_t new_id;
};

class BpeMerges {
 public:
  // `byte_ids[b]`: the id of the one-byte token for byte b.
  explicit BpeMerges(const std::array<std::int32_t, 256>& byte_ids) : byte_ids_(byte_ids) {}
  void add(std::int32_t left, std::int32_t right, std::uint32_t rank, std::int32_t new_id) {
    pairs_[key(left, right)] = {rank, new_id};
  }
  std::size_t size() const { return pairs_.size(); }
  const MergeResult* find(std::int32_t left, std::int32_t right) const {
    const auto it = pairs_.find(key(left, right));
    return it == pairs_.end() ? nullptr : &it->second;
  }

  // Scratch space for merge_word, reused between calls.
  struct Scratch {
    struct Symbol {
      std::int32_t id;
      std::int32_t prev;
      std::int32_t next;
      std::uint32_t bytes;  // 0 once merged into its left neighbour
    };
    struct Candidate {
      std::uint32_t rank;
      std::uint32_t pos;
      std::int32_t new_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> queue;
  };
  // Appends the ids of `word` (non-empty bytes, one starting symbol per byte) after all merges to `out`.
  void merge_word(std::string_view word, Scratch& scratch, std::vector<std::int32_t>& out) const;
  // The same for starting symbols given one by one: start_word, then add_symbol for each (at least one),
  // then merge_symbols.
  static void start_word(Scratch& scratch) {
    scratch.symbols.clear();
    scratch.queue.clear();
  }
  static void add_symbol(Scratch& scratch, std::int32_t id, std::uint32_t bytes) {
    const auto i = static_cast<std::int32_t>(scratch.symbols.size());
    if (i > 0) scratch.symbols.back().next = i;
    scratch.symbols.push_back({id, i - 1, -1, bytes});
  }
  void merge_symbols(Scratch& scratch, std::vector<std::int32_t>& out) const;

 private:
  static std::uint64_t key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  std::array<std::int32_t, 256> byte_ids_;
  std::unordered_map<std::uint64_t, MergeResult> pairs_;
};

}  // namespace cleave::tokenizer
