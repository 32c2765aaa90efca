// Tensor views, allocator accounting, cap and caching, byte parsing.
#include <gtest/gtest.h>

#include "engine/core/tensor.hpp"

namespace cleave {
namespace {

class TestAllocator final : public Allocator {
 public:
  TestAllocator() : Allocator(Device::cpu()) {}
  ~TestAllocator() override { release_cache(); }

 protected:
  void* system_allocate(std::size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void system_free(void* ptr, std::size_t) override { std::free(ptr); }
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

TEST(Bytes, ParsesUnitsAndRejectsGarbage) {
  EXPECT_EQ(parse_bytes("512MiB", "device.memory_limit"), 512LL << 20);
  EXPECT_EQ(parse_bytes("2GB", "k"), 2000000000LL);
  EXPECT_EQ(parse_bytes("1.5KiB", "k"), 1536);
  EXPECT_EQ(parse_bytes("4096", "k"), 4096);
  EXPECT_THROW(parse_bytes("12 parsecs", "device.memory_limit"), Error);
  EXPECT_THROW(parse_bytes("-3MiB", "device.memory_limit"), Error);
}

}  // namespace
}  // namespace cleave
