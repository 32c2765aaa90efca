// The merge cache: a pre-token word's bytes -> its token ids, so each distinct word is merged once.
//
// Invariant: find() returns exactly what insert() stored for the same bytes. Keys and ids live in two
// arenas and the slots in one open-addressing table (linear probing, at most half full), so a lookup
// allocates nothing and an insert only when an arena or the table grows. When the arenas pass their limit
// the cache is emptied and refilled (memory stays bounded on any corpus). Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cleave::tokenizer {

class WordCache {
 public:
  WordCache();
  // The ids stored for `word`, or an empty span when it is not cached (a word has at least one id).
  std::span<const std::int32_t> find(std::string_view word, std::uint64_t hash) const;
  void insert(std::string_view word, std::uint64_t hash, std::span<const std::int32_t> ids);
  std::size_t size() const { return used_; }
  static std::uint64_t hash(std::string_view word);

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t key_offset = 0;
    std::uint32_t key_bytes = 0;
    std::uint32_t ids_offset = 0;
    std::uint32_t ids_count = 0;  // 0: empty slot
  };
  void grow();

  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<std::int32_t> ids_;
  std::size_t used_ = 0;
};

}  // namespace cleave::tokenizer
