// Caching allocator: size-keyed free lists, accounting under one mutex. Every request is served by a block of its
// size class (round_block): below 1 MiB, 8 classes per power of two (a block at most 1/8 larger than its request,
// never finer than 256 B: 256 B steps up to 2 KiB, then 2 KiB..4 KiB in steps of 256 B, 4..8 KiB of 512 B, ...,
// 512 KiB..1 MiB of 64 KiB), from 1 MiB the size rounded up to 256 B. A request takes a cached block of its own
// class; one of at least 1 MiB with none free takes the smallest cached block at most 1/8 larger (best fit). Both
// serve requests whose sizes vary a little from step to step (an MoE's per-expert rows, on one rank or under expert
// parallelism) from blocks already cached instead of caching one per size seen (docs/cuda.md, "Out of memory on a
// GPU"); the waste is at most 1/8 of a request (below 2 KiB, under 256 B). The statistics count requested bytes,
// whichever block serves them (so peaks and memory plans do not see the classes); `reserved` counts blocks. This
// code is the CPU's, the pinned host's and the CUDA allocator's alike (they override only the system calls). Cache
// nodes a request takes out are kept (spare_nodes_) for the next release to put back, and Storage blocks come from a
// pool of slots.
#include "engine/core/allocator.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/core/error.hpp"

namespace cleave {
namespace {

constexpr std::size_t kBlockRound = 256;                    // the finest step of a block's size
constexpr std::size_t kBestFitMin = std::size_t{1} << 20;  // smaller requests take a block of their class only
constexpr std::size_t kBestFitSlack = 8;                    // a block at most 1/8 larger than the request
constexpr std::size_t kClassesPerDoubling = 8;              // below kBestFitMin: classes 1/8 of a power of two apart

// The block size that serves a request of `bytes` (see the file's comment): below kBestFitMin its size class, the
// request rounded up to a multiple of max(256, 2^floor(log2 bytes) / 8), at most 1/8 above it and never above
// kBestFitMin; from kBestFitMin a multiple of 256.
std::size_t round_block(std::size_t bytes) {
  if (bytes == 0) return kBlockRound;
  const std::size_t step =
      bytes < kBestFitMin ? std::max(kBlockRound, std::bit_floor(bytes) / kClassesPerDoubling) : kBlockRound;
  return (bytes + step - 1) / step * step;
}

using BlockCache = std::multimap<std::size_t, void*>;

// The cached block for a request of `block` bytes (its class, round_block): its own size, else (from kBestFitMin) the
// smallest at most block / kBestFitSlack larger; cache.end() when none.
BlockCache::iterator find_cached(BlockCache& cache, std::size_t block) {
  const auto it = cache.lower_bound(block);  // an exact block first, as equal keys come before larger ones
  if (it == cache.end() || it->first == block) return it;
  return block >= kBestFitMin && it->first <= block + block / kBestFitSlack ? it : cache.end();
}

std::int64_t cached_bytes(const BlockCache& cache) {
  std::int64_t bytes = 0;
  for (const auto& entry : cache) bytes += static_cast<std::int64_t>(entry.first);
  return bytes;
}

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : Allocator(Device::cpu()) {}
  ~CpuAllocator() override { release_cache(); }

 protected:
  void* system_allocate(std::size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void system_free(void* ptr, std::size_t) override { std::free(ptr); }
};

}  // namespace

std::string_view memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kCommunication: return "communication";
    case MemoryCategory::kWorkspace: return "workspace";
    case MemoryCategory::kCount: break;
  }
  CLEAVE_ASSERT(false, "bad memory category {}", static_cast<int>(category));
}

std::string MemoryStats::breakdown() const {
  std::string out;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", memory_category_name(static_cast<MemoryCategory>(c)), format_bytes(current[c]));
  }
  return out;
}

Storage::~Storage() { owner_->release(data_, bytes_, block_bytes_, category_); }
Device Storage::device() const { return owner_->device(); }

void Allocator::zero_bytes(void* data, std::size_t bytes) {
  CLEAVE_ASSERT(device_.is_cpu(), "Allocator::zero_bytes on {}: a device allocator overrides it", device_.str());
  if (bytes > 0) std::memset(data, 0, bytes);
}

Allocator::~Allocator() = default;

std::shared_ptr<Storage> Allocator::allocate(std::size_t bytes, MemoryCategory category) {
  std::size_t block = round_block(bytes);  // the size of the block that serves the request
  const int c = static_cast<int>(category);
  const auto request = static_cast<std::int64_t>(bytes);
  const auto note_peak = [&] {  // under the lock, once the request is live
    stats_.peak[c] = std::max(stats_.peak[c], stats_.current[c]);
    stats_.peak_total = std::max(stats_.peak_total, stats_.current_total);
  };
  void* data = nullptr;
  {
    std::lock_guard lock(mutex_);
    ++stats_.requests;
    if (stats_.limit > 0 && stats_.current_total + request > stats_.limit) {
      throw OutOfMemoryError(fmt::format(
          "out of memory on {}: cannot allocate {} for {} with device.memory_limit {} "
          "({} in use: {}). Lower the batch or model size, or split the model over more ranks "
          "(parallel.pipeline_model_parallel_size / tensor_model_parallel_size)",
          device_.str(), format_bytes(request), memory_category_name(category), format_bytes(stats_.limit),
          format_bytes(stats_.current_total), stats_.breakdown()));
    }
    if (auto it = find_cached(cache_, block); it != cache_.end()) {
      data = it->second;
      block = it->first;
      spare_nodes_.push_back(cache_.extract(it));  // release() reuses the node: no operator new once warm
    }
    stats_.current[c] += request;  // counted now, so a concurrent request sees it against the cap
    stats_.current_total += request;
    if (data != nullptr) note_peak();
  }
  if (data == nullptr) {
    const auto undo = [&] {  // under the lock: the accounting as before the request
      stats_.current[c] -= request;
      stats_.current_total -= request;
    };
    try {
      data = system_allocate(block);
    } catch (...) {
      std::lock_guard lock(mutex_);
      undo();
      throw;
    }
    std::lock_guard lock(mutex_);
    if (data == nullptr) {
      undo();
      throw OutOfMemoryError(fmt::format(
          "out of memory on {}: the system refused {} for {} ({} in use: {}; {} reserved from the system, {} of it "
          "cached in {} free blocks of other sizes). Lower the batch or model size, split the model over more ranks, "
          "or set device.memory_limit below the device's memory so the cap refuses first",
          device_.str(), format_bytes(static_cast<std::int64_t>(block)), memory_category_name(category),
          format_bytes(stats_.current_total), stats_.breakdown(), format_bytes(stats_.reserved),
          format_bytes(cached_bytes(cache_)), cache_.size()));
    }
    ++stats_.system_allocations;
    stats_.reserved += static_cast<std::int64_t>(block);
    note_peak();
  }
  return std::allocate_shared<Storage>(PoolAllocator<Storage>(storage_pool_), data, bytes, block, category, this);
}

void Allocator::release(void* data, std::size_t bytes, std::size_t block_bytes, MemoryCategory category) {
  std::lock_guard lock(mutex_);
  stats_.current[static_cast<int>(category)] -= static_cast<std::int64_t>(bytes);
  stats_.current_total -= static_cast<std::int64_t>(bytes);
  if (spare_nodes_.empty()) {
    cache_.emplace(block_bytes, data);
    return;
  }
  auto node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.key() = block_bytes;
  node.mapped() = data;
  cache_.insert(std::move(node));
}

void Allocator::set_limit(std::int64_t bytes) {
  CLEAVE_CHECK(bytes >= 0, "memory limit must be >= 0, got {}", bytes);
  std::lock_guard lock(mutex_);
  stats_.limit = bytes;
}

std::int64_t Allocator::limit() const {
  std::lock_guard lock(mutex_);
  return stats_.limit;
}

MemoryStats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Allocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
}

void Allocator::release_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [block, ptr] : cache_) {
    system_free(ptr, block);
    stats_.reserved -= static_cast<std::int64_t>(block);
  }
  cache_.clear();
}

std::unique_ptr<Allocator> make_cpu_allocator() { return std::make_unique<CpuAllocator>(); }

// Process-wide on purpose, as the heap is: thread-safe, and a run never caps, resets or reports it (its own tensors
// come from the allocator make_device_allocator makes for its rank), so no result, cap or reported figure depends on
// what it holds and two runs in one process cannot disturb each other through it (docs/ops.md "Backend resources").
Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

std::int64_t parse_bytes(std::string_view text, std::string_view what) {
  std::string_view s = text;
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  double value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  CLEAVE_CHECK(ec == std::errc() && value >= 0, "{}: cannot read '{}' as a size; expected e.g. 512MiB, 2GB, 1048576",
               what, text);
  std::string_view unit(ptr, static_cast<std::size_t>(s.data() + s.size() - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  CLEAVE_CHECK(scale > 0, "{}: unknown unit '{}' in '{}'; expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", what,
               unit, text);
  const double bytes = value * scale;
  // llround of a double past int64 (1e300TiB, "inf") is unspecified: it came back negative, a cap below zero.
  CLEAVE_CHECK(std::isfinite(bytes) && bytes < 9.2e18, "{}: '{}' is too large (at most about 8 EiB)", what, text);
  return static_cast<std::int64_t>(std::llround(bytes));
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (std::llabs(bytes) >= (1LL << 30)) return fmt::format("{:.2f} GiB", b / (1LL << 30));
  if (std::llabs(bytes) >= (1LL << 20)) return fmt::format("{:.2f} MiB", b / (1LL << 20));
  if (std::llabs(bytes) >= (1LL << 10)) return fmt::format("{:.2f} KiB", b / (1LL << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace cleave
