// CudaCachingAllocator on a real device: accounting by category (current and peak), the cap (refused with a
// message naming the request, the cap and the usage; nothing changes), a request the system refuses, no
// cudaMalloc after the first of repeated identical "steps" (stats().system_allocations is flat), stream-ordered
// reuse (a freed block handed to a new owner on the same stream without a sync keeps both owners' data
// right), and release_cache.
#include "engine/cuda/caching_allocator.hpp"

#include <gtest/gtest.h>

#include "engine/cuda/copy.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::caching_allocator_test {
namespace {

using CudaAllocator = CudaTest;

TEST_F(CudaAllocator, AccountsByCategoryWithPeaks) {
  cuda::CudaCachingAllocator alloc(0, stream());
  {
    auto params = alloc.allocate(1000, MemoryCategory::kParameters);
    auto grads = alloc.allocate(3000, MemoryCategory::kGradients);
    {
      auto acts = alloc.allocate(5000, MemoryCategory::kActivations);
      const MemoryStats s = alloc.stats();
      EXPECT_EQ(s.current_of(MemoryCategory::kParameters), 1000);
      EXPECT_EQ(s.current_of(MemoryCategory::kGradients), 3000);
      EXPECT_EQ(s.current_of(MemoryCategory::kActivations), 5000);
      EXPECT_EQ(s.current_total, 9000);
      EXPECT_EQ(alloc.device(), Device::cuda(0));
      cudaPointerAttributes attributes{};
      CLEAVE_CUDA_CHECK(cudaPointerGetAttributes(&attributes, acts->data()));
      EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
    }
    const MemoryStats s = alloc.stats();
    EXPECT_EQ(s.current_of(MemoryCategory::kActivations), 0);
    EXPECT_EQ(s.peak_of(MemoryCategory::kActivations), 5000);
    EXPECT_EQ(s.peak_total, 9000);
    EXPECT_EQ(s.current_total, 4000);
  }
  EXPECT_EQ(alloc.stats().current_total, 0);
  EXPECT_GT(alloc.stats().reserved, 0);
  sync();
  alloc.release_cache();
  EXPECT_EQ(alloc.stats().reserved, 0);
}

TEST_F(CudaAllocator, CapRefusesWithTheUsageAndChangesNothing) {
  cuda::CudaCachingAllocator alloc(0, stream());
  alloc.set_limit(1 << 20);
  auto held = alloc.allocate(600 << 10, MemoryCategory::kParameters);
  const MemoryStats before = alloc.stats();
  try {
    auto refused = alloc.allocate(500 << 10, MemoryCategory::kActivations);
    FAIL() << "a request past the cap was granted";
  } catch (const OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("device.memory_limit 1.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("parameters 600.00 KiB"), std::string::npos) << message;
  }
  const MemoryStats after = alloc.stats();
  EXPECT_EQ(after.current_total, before.current_total);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

TEST_F(CudaAllocator, SystemRefusalIsAnOutOfMemoryErrorAndTheAllocatorStillWorks) {
  cuda::CudaCachingAllocator alloc(0, stream());
  auto small = alloc.allocate(4096, MemoryCategory::kWorkspace);
  small.reset();  // cached: released and retried before the refusal
  EXPECT_THROW(alloc.allocate(std::size_t{1} << 50, MemoryCategory::kActivations), OutOfMemoryError);
  EXPECT_EQ(alloc.stats().current_total, 0);
  auto again = alloc.allocate(4096, MemoryCategory::kWorkspace);
  EXPECT_NE(again->data(), nullptr);
}

TEST_F(CudaAllocator, NoCudaMallocAfterTheFirstStep) {
  cuda::CudaCachingAllocator alloc(0, stream());
  const std::size_t sizes[] = {4, 1000, 4096, 33 * 1024 + 7, std::size_t{3} << 20};
  auto step = [&] {
    std::vector<Tensor> live;
    for (std::size_t bytes : sizes) {
      Tensor t = Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DType::kU16, MemoryCategory::kActivations, alloc);
      cuda::fill_bytes_async(t, 0x5a, engine_stream());
      live.push_back(t);
    }
    live.erase(live.begin() + 1);  // frees in a different order than it allocates
  };
  step();
  const MemoryStats warm = alloc.stats();
  EXPECT_EQ(warm.system_allocations, static_cast<int64_t>(std::size(sizes)));
  for (int i = 0; i < 10; ++i) step();
  const MemoryStats steady = alloc.stats();
  EXPECT_EQ(steady.system_allocations, warm.system_allocations) << "cudaMalloc ran in the steady state";
  EXPECT_EQ(steady.requests, warm.requests * 11);
  EXPECT_EQ(steady.reserved, warm.reserved);
}

TEST_F(CudaAllocator, FreedBlockIsReusedOnTheSameStreamWithoutASync) {
  cuda::CudaCachingAllocator alloc(0, stream());
  const int64_t n = int64_t{1} << 22;  // 16 MiB of u32
  Tensor first_copy = Tensor::empty(Shape{n}, DType::kI32, MemoryCategory::kActivations, alloc);
  Tensor second_copy = Tensor::empty(Shape{n}, DType::kI32, MemoryCategory::kActivations, alloc);
  void* first_data = nullptr;
  {
    Tensor first = Tensor::empty(Shape{n}, DType::kI32, MemoryCategory::kActivations, alloc);
    first_data = first.raw_data();
    cuda::fill_bytes_async(first, 0x11, engine_stream());
    cuda::copy_async(first_copy, first, engine_stream());
  }  // released with its copy still queued
  Tensor second = Tensor::empty(Shape{n}, DType::kI32, MemoryCategory::kActivations, alloc);
  EXPECT_EQ(second.raw_data(), first_data) << "the freed block was not reused";
  cuda::fill_bytes_async(second, 0x22, engine_stream());
  cuda::copy_async(second_copy, second, engine_stream());
  sync();
  int64_t wrong = 0;
  for (int32_t v : download<int32_t>(first_copy)) wrong += v != 0x11111111 ? 1 : 0;
  for (int32_t v : download<int32_t>(second_copy)) wrong += v != 0x22222222 ? 1 : 0;
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace cleave::testing::caching_allocator_test
