// Tensor views, allocator accounting, cap and caching (best fit of large blocks), system refusals and faults, byte
// parsing.
#include <gtest/gtest.h>

#include "engine/core/tensor.hpp"

namespace cleave::tensor_test {
namespace {

class TestAllocator final : public Allocator {
 public:
  TestAllocator() : Allocator(Device::cpu()) {}
  ~TestAllocator() override { release_cache(); }

 protected:
  void* system_allocate(std::size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void system_free(void* ptr, std::size_t) override { std::free(ptr); }
};

// A system allocator that refuses (returns null) or fails otherwise (throws, as a device allocator does when CUDA
// reports a fault at the allocation call) from the `fail_from`-th system allocation on.
class FailingAllocator final : public Allocator {
 public:
  enum class Mode { kRefuse, kThrow };
  FailingAllocator(Mode mode, int fail_from) : Allocator(Device::cpu()), mode_(mode), left_(fail_from) {}
  ~FailingAllocator() override { release_cache(); }

 protected:
  void* system_allocate(std::size_t bytes) override {
    if (left_-- > 0) return std::aligned_alloc(64, bytes);
    if (mode_ == Mode::kThrow) throw BackendError("cudaMalloc of 1 KiB on cuda:0 failed: an illegal memory access");
    return nullptr;
  }
  void system_free(void* ptr, std::size_t) override { std::free(ptr); }

 private:
  Mode mode_;
  int left_;
};

TEST(Tensor, ViewsShareStorageAndSliceRows) {
  Tensor t = Tensor::empty({4, 3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), Shape({2, 3}));
  EXPECT_EQ(rows.data<float>()[0], 3.0f);
  Tensor flat = rows.view({6});
  flat.data<float>()[5] = -1.0f;
  EXPECT_EQ(t.data<float>()[8], -1.0f);
  Tensor copy = t.clone(MemoryCategory::kActivations);
  copy.data<float>()[0] = 42.0f;
  EXPECT_EQ(t.data<float>()[0], 0.0f);
}

TEST(Tensor, DtypeMismatchIsABug) {
  Tensor t = Tensor::zeros({2}, DType::kI32, MemoryCategory::kWorkspace, cpu_allocator());
  EXPECT_THROW(t.data<float>(), InternalError);
}

TEST(Allocator, AccountsByCategoryAndTracksPeak) {
  TestAllocator a;
  {
    Tensor p = Tensor::empty({100}, DType::kF32, MemoryCategory::kParameters, a);
    Tensor g = Tensor::empty({50}, DType::kF32, MemoryCategory::kGradients, a);
    auto s = a.stats();
    EXPECT_EQ(s.current_of(MemoryCategory::kParameters), 400);
    EXPECT_EQ(s.current_of(MemoryCategory::kGradients), 200);
    EXPECT_EQ(s.current_total, 600);
  }
  auto s = a.stats();
  EXPECT_EQ(s.current_total, 0);
  EXPECT_EQ(s.peak_total, 600);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_total, 0);
}

TEST(Allocator, ReusesCachedBlocksWithoutSystemAllocation) {
  TestAllocator a;
  { Tensor t = Tensor::empty({1000}, DType::kF32, MemoryCategory::kActivations, a); }
  const auto before = a.stats().system_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1000}, DType::kF32, MemoryCategory::kActivations, a);
  }
  EXPECT_EQ(a.stats().system_allocations, before);
  EXPECT_EQ(a.stats().requests, 11);
}

TEST(Allocator, CapRefusesWithCategoriesAndLeavesStateUnchanged) {
  TestAllocator a;
  a.set_limit(1000);
  Tensor p = Tensor::empty({200}, DType::kF32, MemoryCategory::kParameters, a);
  try {
    Tensor big = Tensor::empty({100}, DType::kF32, MemoryCategory::kActivations, a);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("400 B for activations"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameters 800 B"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.stats().current_total, 800);
}

TEST(Allocator, SystemRefusalNamesTheUsageAndTheCacheAndChangesNothing) {
  FailingAllocator a(FailingAllocator::Mode::kRefuse, 2);
  Tensor p = Tensor::empty({200}, DType::kF32, MemoryCategory::kParameters, a);
  { Tensor t = Tensor::empty({64}, DType::kF32, MemoryCategory::kWorkspace, a); }  // cached: 256 B
  const MemoryStats before = a.stats();
  try {
    Tensor big = Tensor::empty({1000}, DType::kF32, MemoryCategory::kActivations, a);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the system refused 4.00 KiB for activations (800 B in use: parameters 800 B"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("1.25 KiB reserved from the system, 256 B of it cached in 1 free blocks"), std::string::npos)
        << msg;
  }
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.current_total, before.current_total);
  EXPECT_EQ(after.peak_total, before.peak_total);  // a refused request never was live
  EXPECT_EQ(after.peak_of(MemoryCategory::kActivations), 0);
  EXPECT_EQ(after.reserved, before.reserved);
}

TEST(Allocator, SystemFaultPropagatesAsItselfAndChangesNothing) {
  FailingAllocator a(FailingAllocator::Mode::kThrow, 1);
  Tensor p = Tensor::empty({200}, DType::kF32, MemoryCategory::kParameters, a);
  const MemoryStats before = a.stats();
  EXPECT_THROW(Tensor::empty({1000}, DType::kF32, MemoryCategory::kActivations, a), BackendError);
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.current_total, before.current_total);
  EXPECT_EQ(after.current_of(MemoryCategory::kActivations), 0);
  EXPECT_EQ(after.peak_total, before.peak_total);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  p = Tensor();  // back to the cache: 800 B in a 1,024 B block
  Tensor again = Tensor::empty({200}, DType::kF32, MemoryCategory::kParameters, a);  // a hit: no system call
  EXPECT_EQ(a.stats().current_total, 800);
  EXPECT_EQ(a.stats().system_allocations, before.system_allocations);
}

// Requests of at least 1 MiB whose sizes vary a little (the experts' rows under expert parallelism) reuse a cached
// block up to 1/8 larger instead of caching one block per size; smaller requests, and an exact size when one is
// free, are served as before. The accounting counts requested bytes whichever block serves them.
TEST(Allocator, LargeRequestTakesTheSmallestCachedBlockAtMostAnEighthLarger) {
  TestAllocator a;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const auto storage = [&](std::size_t bytes) { return a.allocate(bytes, MemoryCategory::kActivations); };
  void* two = nullptr;
  void* two_and_a_tenth = nullptr;
  {
    auto x = storage(2 * kMiB), y = storage(2 * kMiB + kMiB / 10);
    two = x->data(), two_and_a_tenth = y->data();
  }
  const std::int64_t system = a.stats().system_allocations;
  {
    auto s = storage(2 * kMiB - kMiB / 10);  // 1.9 MiB: the 2 MiB block, the smaller of the two that fit
    EXPECT_EQ(s->data(), two);
    EXPECT_EQ(a.stats().current_total, static_cast<std::int64_t>(2 * kMiB - kMiB / 10));
    auto t = storage(2 * kMiB);  // its own size is taken: the 2.1 MiB block (1/20 larger)
    EXPECT_EQ(t->data(), two_and_a_tenth);
  }
  EXPECT_EQ(a.stats().system_allocations, system);
  {
    auto e = storage(2 * kMiB);  // both free again, under their own sizes: the exact one
    EXPECT_EQ(e->data(), two);
  }
  { auto far = storage(kMiB + kMiB / 2); }  // 1.5 MiB: 2 MiB is 1/3 larger, a block of its own
  EXPECT_EQ(a.stats().system_allocations, system + 1);
  { auto small = storage(kMiB / 2); }  // below 1 MiB: a block of its class only, although larger blocks are free
  EXPECT_EQ(a.stats().system_allocations, system + 2);
  EXPECT_EQ(a.stats().current_total, 0);
}

// Below 1 MiB a request is served by a block of its size class (8 per power of two, at least 256 B apart): sizes that
// vary a little from step to step (an MoE's per-expert rows) share one cached block, no block is more than 1/8 (or,
// below 2 KiB, 255 B) larger than its request, and the accounting still counts requested bytes.
TEST(Allocator, SmallRequestsShareTheBlockOfTheirSizeClass) {
  TestAllocator a;
  const auto storage = [&](std::size_t bytes) { return a.allocate(bytes, MemoryCategory::kActivations); };
  void* block = nullptr;
  { block = storage(10'000)->data(); }  // class 10,240 B (8 KiB..16 KiB in steps of 1 KiB)
  const std::int64_t system = a.stats().system_allocations;
  EXPECT_EQ(a.stats().reserved, 10'240);
  for (std::size_t bytes : {9'217, 9'800, 10'240}) {  // the same class: the same block, no system call
    auto s = storage(bytes);
    EXPECT_EQ(s->data(), block) << bytes;
    EXPECT_EQ(a.stats().current_total, static_cast<std::int64_t>(bytes));
  }
  EXPECT_EQ(a.stats().system_allocations, system);
  { auto next = storage(10'241); }  // the next class (11,264 B): a block of its own
  { auto below = storage(9'216); }   // the class below (9,216 B): a block of its own
  EXPECT_EQ(a.stats().system_allocations, system + 2);
  EXPECT_EQ(a.stats().reserved, 10'240 + 11'264 + 9'216);
  // The classes' bound, over every size up to 1 MiB: a block at least its request, at most 1/8 (or 255 B) larger.
  TestAllocator b;
  std::int64_t reserved = 0;
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 20); bytes += 1 + bytes / 64) {
    { auto s = b.allocate(bytes, MemoryCategory::kWorkspace); }
    const std::int64_t block_bytes = b.stats().reserved - reserved;
    reserved = b.stats().reserved;
    if (block_bytes == 0) continue;  // served by a block of the same class cached before
    EXPECT_GE(block_bytes, static_cast<std::int64_t>(bytes));
    EXPECT_LE(block_bytes, static_cast<std::int64_t>(std::max(bytes + bytes / 8, bytes + 255))) << bytes;
    EXPECT_EQ(block_bytes % 256, 0) << bytes;
  }
}

TEST(Bytes, ParsesUnitsAndRejectsGarbage) {
  EXPECT_EQ(parse_bytes("512MiB", "device.memory_limit"), 512LL << 20);
  EXPECT_EQ(parse_bytes("2GB", "k"), 2000000000LL);
  EXPECT_EQ(parse_bytes("1.5KiB", "k"), 1536);
  EXPECT_EQ(parse_bytes("4096", "k"), 4096);
  EXPECT_THROW(parse_bytes("12 parsecs", "device.memory_limit"), Error);
  EXPECT_THROW(parse_bytes("-3MiB", "device.memory_limit"), Error);
}

}  // namespace
}  // namespace cleave::tensor_test
