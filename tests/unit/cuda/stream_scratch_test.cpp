// engine/comm/nccl/stream_scratch.hpp on the CPU, with recording stand-ins for cudaMallocAsync / cudaFreeAsync: the
// NCCL communicator's staging scratch allocates on the first (warm-up) request and again only for a larger one, so a
// steady step that repeats the warm-up's reductions makes no call at all; a growth releases the old block before
// taking the new one, both on the communicator's stream; the memory is released exactly once (release() or the
// destructor); a failed growth throws naming the call and leaves the scratch empty, and the next request retries; a
// failed release at destruction does not throw; another stream is refused.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/nccl/stream_scratch.hpp"

namespace cleave::testing::stream_scratch_test {
namespace {

using comm::detail::StreamMemoryCalls;
using comm::detail::StreamScratch;

// One call the stand-ins saw, in order.
struct Call {
  bool allocate = false;
  std::size_t bytes = 0;  // allocations only
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
};

// What the stand-ins saw (plain function pointers cannot capture: one record per test, set by the fixture). Each
// allocation hands out a distinct fake address (never dereferenced).
struct Record {
  std::vector<Call> calls;
  cudaError_t allocate_status = cudaSuccess;
  cudaError_t release_status = cudaSuccess;
  std::uintptr_t next_address = 0x10000;
  int allocations() const {
    int count = 0;
    for (const Call& c : calls) count += c.allocate ? 1 : 0;
    return count;
  }
  int releases() const { return static_cast<int>(calls.size()) - allocations(); }
};
Record* record = nullptr;

cudaError_t fake_allocate(void** ptr, std::size_t bytes, cudaStream_t stream) {
  if (record->allocate_status != cudaSuccess) {
    record->calls.push_back({true, bytes, nullptr, stream});
    return record->allocate_status;
  }
  *ptr = reinterpret_cast<void*>(record->next_address);
  record->next_address += 0x10000000;
  record->calls.push_back({true, bytes, *ptr, stream});
  return cudaSuccess;
}
cudaError_t fake_release(void* ptr, cudaStream_t stream) {
  record->calls.push_back({false, 0, ptr, stream});
  return record->release_status;
}

constexpr std::size_t kGranule = StreamScratch::kGranule;

class StreamScratchTest : public ::testing::Test {
 protected:
  void SetUp() override { record = &rec_; }
  void TearDown() override { record = nullptr; }
  static StreamMemoryCalls calls() { return {fake_allocate, fake_release}; }
  // Stream handles the calls must pass through unchanged (never dereferenced).
  cudaStream_t stream_ = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x5a});
  cudaStream_t other_ = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x6b});
  Record rec_;
};

TEST_F(StreamScratchTest, TheFirstRequestAllocatesWholeGranulesOnItsStream) {
  StreamScratch scratch(calls());
  char* data = scratch.reserve(kGranule + 3, stream_);
  ASSERT_EQ(rec_.calls.size(), 1u);
  EXPECT_TRUE(rec_.calls[0].allocate);
  EXPECT_EQ(rec_.calls[0].bytes, 2 * kGranule);
  EXPECT_EQ(rec_.calls[0].stream, stream_);
  EXPECT_EQ(data, rec_.calls[0].ptr);
  EXPECT_EQ(scratch.stats().capacity_bytes, 2 * kGranule);
  EXPECT_EQ(scratch.stats().growths, 1);
}

// A training step's reductions: the buckets of one step, in the same order every step. The first step grows the
// scratch to the largest; every later step makes no CUDA call.
TEST_F(StreamScratchTest, StepsAfterTheWarmUpAllocateNothing) {
  const std::size_t step[] = {3 * kGranule + 17, 40, kGranule, 7 * kGranule - 1, 7 * kGranule, 0, 5 * kGranule};
  StreamScratch scratch(calls());
  for (std::size_t bytes : step) {
    char* data = scratch.reserve(bytes, stream_);
    if (bytes > 0) {
      EXPECT_NE(data, nullptr);
    }
    EXPECT_GE(scratch.stats().capacity_bytes, bytes);
  }
  const std::size_t warm_calls = rec_.calls.size();
  const std::int64_t warm_growths = scratch.stats().growths;
  EXPECT_EQ(scratch.stats().capacity_bytes, 7 * kGranule);
  EXPECT_EQ(warm_growths, 2);  // 3 * granule + 17 -> 4 granules, then 7 granules; the rest fit
  for (int repeat = 0; repeat < 5; ++repeat) {
    for (std::size_t bytes : step) scratch.reserve(bytes, stream_);
  }
  EXPECT_EQ(rec_.calls.size(), warm_calls) << "a steady step called cudaMallocAsync or cudaFreeAsync";
  EXPECT_EQ(scratch.stats().growths, warm_growths);
}

TEST_F(StreamScratchTest, AGrowthReleasesTheOldBlockOnItsStreamBeforeTakingTheNew) {
  StreamScratch scratch(calls());
  char* small = scratch.reserve(100, stream_);
  char* same = scratch.reserve(kGranule, stream_);  // still one granule
  EXPECT_EQ(same, small);
  char* large = scratch.reserve(kGranule + 1, stream_);
  ASSERT_EQ(rec_.calls.size(), 3u);
  EXPECT_FALSE(rec_.calls[1].allocate);
  EXPECT_EQ(rec_.calls[1].ptr, small);
  EXPECT_EQ(rec_.calls[1].stream, stream_);
  EXPECT_TRUE(rec_.calls[2].allocate);
  EXPECT_EQ(rec_.calls[2].bytes, 2 * kGranule);
  EXPECT_EQ(rec_.calls[2].stream, stream_);
  EXPECT_EQ(large, rec_.calls[2].ptr);
  EXPECT_NE(large, small);
}

TEST_F(StreamScratchTest, ZeroBytesTakeNothing) {
  StreamScratch scratch(calls());
  EXPECT_EQ(scratch.reserve(0, stream_), nullptr);
  EXPECT_TRUE(rec_.calls.empty());
  EXPECT_EQ(scratch.stats().growths, 0);
}

TEST_F(StreamScratchTest, TheDestructorReleasesOnceOnItsStream) {
  void* taken = nullptr;
  {
    StreamScratch scratch(calls());
    taken = scratch.reserve(64, stream_);
  }
  ASSERT_EQ(rec_.calls.size(), 2u);
  EXPECT_FALSE(rec_.calls[1].allocate);
  EXPECT_EQ(rec_.calls[1].ptr, taken);
  EXPECT_EQ(rec_.calls[1].stream, stream_);
}

TEST_F(StreamScratchTest, ReleaseFreesOnceAndTheDestructorDoesNothingMore) {
  {
    StreamScratch scratch(calls());
    scratch.reserve(64, stream_);
    scratch.release();
    EXPECT_EQ(scratch.stats().capacity_bytes, 0u);
    scratch.release();  // nothing held: no call
  }
  EXPECT_EQ(rec_.allocations(), 1);
  EXPECT_EQ(rec_.releases(), 1);
}

TEST_F(StreamScratchTest, AFailedGrowthThrowsLeavesItEmptyAndTheNextRequestRetries) {
  StreamScratch scratch(calls());
  scratch.reserve(64, stream_);
  rec_.allocate_status = cudaErrorMemoryAllocation;
  try {
    scratch.reserve(3 * kGranule, stream_);
    ADD_FAILURE() << "a refused cudaMallocAsync was not reported";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scratch.stats().capacity_bytes, 0u);
  EXPECT_EQ(rec_.releases(), 1);  // the old block went back first
  rec_.allocate_status = cudaSuccess;
  EXPECT_NE(scratch.reserve(64, stream_), nullptr);
  EXPECT_EQ(scratch.stats().capacity_bytes, kGranule);
}

TEST_F(StreamScratchTest, AFailedReleaseAtTheEndDoesNotThrow) {
  rec_.release_status = cudaErrorIllegalAddress;
  {
    StreamScratch scratch(calls());
    scratch.reserve(16, stream_);
  }  // not std::terminate from a throwing destructor
  EXPECT_EQ(rec_.releases(), 1);
}

TEST_F(StreamScratchTest, AnUncheckedReleaseReportsItsStatusOnceAndTheDestructorDoesNothingMore) {
  rec_.release_status = cudaErrorCudartUnloading;  // CUDA shutting down at process exit: not logged
  {
    StreamScratch scratch(calls());
    scratch.reserve(16, stream_);
    EXPECT_EQ(scratch.release_unchecked(), cudaErrorCudartUnloading);
    EXPECT_EQ(scratch.release_unchecked(), cudaSuccess);  // nothing held any more
    EXPECT_EQ(scratch.stats().capacity_bytes, 0u);
  }
  EXPECT_EQ(rec_.releases(), 1);
}

TEST_F(StreamScratchTest, ACheckedReleaseThatFailsThrowsOnceAndIsNotRetried) {
  rec_.release_status = cudaErrorInvalidValue;
  {
    StreamScratch scratch(calls());
    scratch.reserve(16, stream_);
    EXPECT_THROW(scratch.release(), BackendError);
  }
  EXPECT_EQ(rec_.releases(), 1);
}

TEST_F(StreamScratchTest, MemoryOrderedOnOneStreamIsRefusedOnAnother) {
  StreamScratch scratch(calls());
  scratch.reserve(16, stream_);
  EXPECT_THROW(scratch.reserve(16, other_), InternalError);
  EXPECT_EQ(rec_.calls.size(), 1u);
}

}  // namespace
}  // namespace cleave::testing::stream_scratch_test
