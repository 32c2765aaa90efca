// A bounded least-recently-used map: the eviction policy of GemmContext's plan and algorithm caches (gemm.cpp),
// kept apart from cuBLASLt so it is tested on the CPU (tests/unit/cuda/lru_cache_test.cpp). Host code only: no
// CUDA header.
//
// Invariant: size() <= capacity() (capacity >= 1). find() of a present key is a hit and makes that key the most
// recently used; of an absent key a miss. insert() of an absent key makes it the most recently used and, when
// the cache was full, first evicts (destroys) the least recently used entry. A pointer from find() or insert()
// stays valid until the next insert() (which may evict it) or clear(). Counts only grow (clear() keeps them).
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"

namespace cleave::kernels::cuda {

struct LruCacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
};

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {
    CLEAVE_CHECK(capacity >= 1, "LruCache: capacity {} must be at least 1", capacity);
  }
  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;

  // The entry of `key` (now the most recently used), or null; counts a hit or a miss.
  Value* find(const Key& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      return nullptr;
    }
    ++stats_.hits;
    entries_.splice(entries_.begin(), entries_, it->second);
    return &it->second->second;
  }

  // Adds `key` (which must be absent) as the most recently used entry, evicting the least recently used one
  // when full. Counts no hit or miss (the find() before it did).
  Value& insert(const Key& key, Value value) {
    CLEAVE_ASSERT(!index_.contains(key), "LruCache: insert of a key already present");
    if (entries_.size() == capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
      ++stats_.evictions;
    }
    entries_.emplace_front(key, std::move(value));
    index_.emplace(key, entries_.begin());
    return entries_.front().second;
  }

  void clear() {
    index_.clear();
    entries_.clear();
  }

  std::size_t size() const { return entries_.size(); }
  std::size_t capacity() const { return capacity_; }
  const LruCacheStats& stats() const { return stats_; }

  // The keys from the most to the least recently used (tests, diagnostics).
  std::vector<Key> keys_by_recency() const {
    std::vector<Key> keys;
    keys.reserve(entries_.size());
    for (const auto& entry : entries_) keys.push_back(entry.first);
    return keys;
  }

 private:
  using Entries = std::list<std::pair<Key, Value>>;
  std::size_t capacity_;
  Entries entries_;  // most recently used first
  std::map<Key, typename Entries::iterator> index_;
  LruCacheStats stats_;
};

}  // namespace cleave::kernels::cuda
