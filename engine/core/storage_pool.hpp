// StoragePool: the memory of the Storage blocks one allocator hands out (each with its shared_ptr control block, as
// std::allocate_shared lays them out), in fixed-size slots carved from slabs the pool owns. A freed slot goes on an
// intrusive free list (its first bytes hold the next free slot) and the next Storage takes it, so once a step has
// made as many tensors at once as it ever will, making and dropping tensors calls no operator new.
//
// Invariants: a slot is on the free list or holds one live object, never both; slabs are freed only with the pool,
// which must outlive every object in it (an Allocator outlives its Storage blocks already: ~Storage calls it).
// PoolAllocator<T> is the std allocator over a pool; it serves one object per call (allocate_shared's only use).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "engine/core/error.hpp"

namespace cleave {

class StoragePool {
 public:
  static constexpr std::size_t kSlotBytes = 128;  // a Storage and its control block take about 80
  static constexpr std::size_t kSlabSlots = 64;

  StoragePool() = default;
  StoragePool(const StoragePool&) = delete;
  StoragePool& operator=(const StoragePool&) = delete;

  void* take(std::size_t bytes, std::size_t align) {
    CLEAVE_ASSERT(bytes <= kSlotBytes && align <= alignof(Slot), "StoragePool: an object of {} bytes (align {}) "
                  "does not fit a {}-byte slot", bytes, align, kSlotBytes);
    std::lock_guard lock(mutex_);
    if (free_ == nullptr) add_slab();
    Slot* slot = free_;
    free_ = slot->next;
    return slot;
  }

  void give(void* p) {
    std::lock_guard lock(mutex_);
    auto* slot = static_cast<Slot*>(p);
    slot->next = free_;
    free_ = slot;
  }

 private:
  union alignas(std::max_align_t) Slot {
    Slot* next;
    std::byte bytes[kSlotBytes];
  };

  void add_slab() {
    slabs_.push_back(std::make_unique<Slot[]>(kSlabSlots));
    for (std::size_t i = 0; i < kSlabSlots; ++i) {
      Slot& slot = slabs_.back()[i];
      slot.next = free_;
      free_ = &slot;
    }
  }

  std::mutex mutex_;
  Slot* free_ = nullptr;
  std::vector<std::unique_ptr<Slot[]>> slabs_;
};

template <class T>
class PoolAllocator {
 public:
  using value_type = T;
  explicit PoolAllocator(StoragePool& pool) noexcept : pool_(&pool) {}
  template <class U>
  PoolAllocator(const PoolAllocator<U>& other) noexcept : pool_(other.pool()) {}  // NOLINT: rebinding converts

  T* allocate(std::size_t n) {
    CLEAVE_ASSERT(n == 1, "PoolAllocator serves one object per call, asked for {}", n);
    return static_cast<T*>(pool_->take(sizeof(T), alignof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { pool_->give(p); }
  StoragePool* pool() const noexcept { return pool_; }

  template <class U>
  bool operator==(const PoolAllocator<U>& other) const noexcept { return pool_ == other.pool(); }

 private:
  StoragePool* pool_;
};

}  // namespace cleave
