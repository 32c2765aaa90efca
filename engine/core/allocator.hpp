// Device allocator with accounting by category, peak tracking and an optional cap.
//
// Invariants:
//  - current(category) is the sum of the sizes of live Storage blocks of that category; peak is its maximum.
//  - live bytes never exceed the cap: a request that would is refused with OutOfMemoryError naming the
//    request, the cap and the usage by category, and nothing changes.
//  - freed blocks are cached by size and reused, so a steady-state training step performs no system
//    allocation: stats().system_allocations stops growing after the first step (tests check this).
//  - nor does it call operator new once warm: each Storage block (and its shared_ptr control block) lives in a slot
//    of the allocator's StoragePool, and the block cache's nodes move between the cache and a spare list.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/device.hpp"
#include "engine/core/storage_pool.hpp"

namespace cleave {

enum class MemoryCategory : int {
  kParameters = 0,
  kGradients,
  kOptimizerState,
  kActivations,
  kCommunication,
  kWorkspace,
  kCount
};
constexpr int kNumMemoryCategories = static_cast<int>(MemoryCategory::kCount);
std::string_view memory_category_name(MemoryCategory category);

struct MemoryStats {
  std::array<std::int64_t, kNumMemoryCategories> current{};
  std::array<std::int64_t, kNumMemoryCategories> peak{};
  std::int64_t current_total = 0;
  std::int64_t peak_total = 0;
  std::int64_t reserved = 0;            // live + cached bytes held from the system
  std::int64_t system_allocations = 0;  // calls that reached the system allocator
  std::int64_t requests = 0;            // all allocate() calls
  std::int64_t limit = 0;               // 0 = no cap

  std::int64_t current_of(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  std::int64_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
  std::string breakdown() const;  // "parameters 1.2 MiB, gradients ..., activations ..." (current)
};

class Allocator;

// One block of device memory. Returned to its allocator's cache when the last owner lets go.
class Storage {
 public:
  Storage(void* data, std::size_t bytes, std::size_t block_bytes, MemoryCategory category, Allocator* owner)
      : data_(data), bytes_(bytes), block_bytes_(block_bytes), category_(category), owner_(owner) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }
  Device device() const;
  Allocator& owner() const { return *owner_; }

 private:
  void* data_;
  std::size_t bytes_;
  std::size_t block_bytes_;
  MemoryCategory category_;
  Allocator* owner_;
};

class Allocator {
 public:
  explicit Allocator(Device device) : device_(device) {}
  virtual ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  std::shared_ptr<Storage> allocate(std::size_t bytes, MemoryCategory category);

  void set_limit(std::int64_t bytes);  // 0 removes the cap
  std::int64_t limit() const;
  MemoryStats stats() const;
  void reset_peak();     // peaks := current (e.g. after model set-up, to measure one step)
  void release_cache();  // return cached blocks to the system
  Device device() const { return device_; }

  // Sets `bytes` bytes at `data` (inside a block of this allocator) to zero where the memory lives: a host
  // memset on the CPU; on a device, enqueued on the allocator's stream (stream-ordered like its reuse), so a
  // device tensor is zeroed without the host touching device memory (Tensor::zero_ calls this).
  virtual void zero_bytes(void* data, std::size_t bytes);

 protected:
  virtual void* system_allocate(std::size_t bytes) = 0;
  virtual void system_free(void* ptr, std::size_t bytes) = 0;

 private:
  friend class Storage;
  void release(void* data, std::size_t bytes, std::size_t block_bytes, MemoryCategory category);

  Device device_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  std::multimap<std::size_t, void*> cache_;  // block size -> free block
  std::vector<std::multimap<std::size_t, void*>::node_type> spare_nodes_;  // cache nodes not in use, for release
  StoragePool storage_pool_;                 // the Storage blocks allocate() hands out
};

// A new CPU allocator (64-byte aligned blocks) with its own cap and counters: one per run, so two runs in one
// process (cleave verify) account and cap their memory separately.
std::unique_ptr<Allocator> make_cpu_allocator();
// The process's default CPU allocator, for tensors outside any run (tests, tools, small host buffers). A run
// never caps or resets it.
Allocator& cpu_allocator();

// "512MiB", "2GB", "1.5GiB", "1048576" -> bytes. Throws Error naming `what` (e.g. the config key).
std::int64_t parse_bytes(std::string_view text, std::string_view what);
std::string format_bytes(std::int64_t bytes);  // "1.50 GiB"

}  // namespace cleave
