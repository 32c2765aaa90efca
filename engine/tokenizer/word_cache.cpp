// The merge cache (see word_cache.hpp).
#include "engine/tokenizer/word_cache.hpp"

#include <cstring>
#include <functional>

namespace cleave::tokenizer {
namespace {
constexpr std::size_t kInitialSlots = 1 << 14;
constexpr std::size_t kArenaLimit = std::size_t{1} << 28;  // bytes of keys or ids before the cache restarts
}  // namespace

WordCache::WordCache() : slots_(kInitialSlots) {}

std::uint64_t WordCache::hash(std::string_view word) { return std::hash<std::string_view>{}(word); }

std::span<const std::int32_t> WordCache::find(std::string_view word, std::uint64_t hash) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.ids_count == 0) return {};
    if (s.hash == hash && s.key_bytes == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      return {ids_.data() + s.ids_offset, s.ids_count};
    }
  }
}

void WordCache::insert(std::string_view word, std::uint64_t hash, std::span<const std::int32_t> ids) {
  if (keys_.size() + word.size() > kArenaLimit || (ids_.size() + ids.size()) * sizeof(std::int32_t) > kArenaLimit) {
    slots_.assign(kInitialSlots, Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }
  if (2 * (used_ + 1) > slots_.size()) grow();
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = hash & mask;
  while (slots_[i].ids_count != 0) i = (i + 1) & mask;
  slots_[i] = {hash, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(word.size()),
               static_cast<std::uint32_t>(ids_.size()), static_cast<std::uint32_t>(ids.size())};
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++used_;
}

void WordCache::grow() {
  std::vector<Slot> old(2 * slots_.size());
  old.swap(slots_);
  const std::size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.ids_count == 0) continue;
    std::size_t i = s.hash & mask;
    while (slots_[i].ids_count != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

}  // namespace cleave::tokenizer
