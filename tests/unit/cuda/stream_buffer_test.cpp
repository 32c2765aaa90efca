// engine/comm/nccl/stream_buffer.hpp on the CPU, with recording stand-ins for cudaMallocAsync / cudaFreeAsync: the
// deterministic reduction's staging is freed exactly once, on the stream it was taken on, whether the scope ends by
// free() or by an exception (the leak this type closes); a failed free on the exception path neither throws nor
// leaves CUDA's last error behind; a failed allocation throws naming the call and frees nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/nccl/stream_buffer.hpp"

namespace cleave::testing {
namespace {

using comm::detail::StreamBuffer;
using comm::detail::StreamMemoryCalls;

// What the stand-ins saw (plain function pointers cannot capture: one record per test, reset by the fixture).
struct Record {
  std::vector<cudaStream_t> allocated_on;
  std::vector<std::pair<void*, cudaStream_t>> freed;
  cudaError_t allocate_status = cudaSuccess;
  cudaError_t release_status = cudaSuccess;
  char memory[64] = {};
};
Record* record = nullptr;

cudaError_t fake_allocate(void** ptr, std::size_t bytes, cudaStream_t stream) {
  record->allocated_on.push_back(stream);
  if (record->allocate_status != cudaSuccess) return record->allocate_status;
  EXPECT_LE(bytes, sizeof(record->memory));
  *ptr = record->memory;
  return cudaSuccess;
}
cudaError_t fake_release(void* ptr, cudaStream_t stream) {
  record->freed.emplace_back(ptr, stream);
  return record->release_status;
}

class StreamBufferTest : public ::testing::Test {
 protected:
  void SetUp() override { record = &rec_; }
  void TearDown() override { record = nullptr; }
  static StreamMemoryCalls calls() { return {fake_allocate, fake_release}; }
  // A stream handle the calls must pass through unchanged (never dereferenced).
  cudaStream_t stream_ = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x5a});
  Record rec_;
};

TEST_F(StreamBufferTest, FreeReturnsTheMemoryOnceOnItsStream) {
  {
    StreamBuffer buffer(48, stream_, calls());
    EXPECT_EQ(buffer.data(), rec_.memory);
    buffer.free();
  }  // the destructor must not free it again
  ASSERT_EQ(rec_.allocated_on.size(), 1u);
  EXPECT_EQ(rec_.allocated_on[0], stream_);
  ASSERT_EQ(rec_.freed.size(), 1u);
  EXPECT_EQ(rec_.freed[0].first, rec_.memory);
  EXPECT_EQ(rec_.freed[0].second, stream_);
}

TEST_F(StreamBufferTest, AThrowBeforeFreeStillReturnsTheMemoryOnItsStream) {
  EXPECT_THROW(
      {
        StreamBuffer buffer(48, stream_, calls());
        throw std::runtime_error("a check inside the exchange failed");
      },
      std::runtime_error);
  ASSERT_EQ(rec_.freed.size(), 1u) << "the staging leaked when a check threw";
  EXPECT_EQ(rec_.freed[0].first, rec_.memory);
  EXPECT_EQ(rec_.freed[0].second, stream_);
}

TEST_F(StreamBufferTest, AFailedFreeWhileUnwindingDoesNotThrow) {
  rec_.release_status = cudaErrorIllegalAddress;
  EXPECT_THROW(
      {
        StreamBuffer buffer(16, stream_, calls());
        throw std::runtime_error("the reduction's launch failed");
      },
      std::runtime_error);  // not std::terminate from a throwing destructor
  EXPECT_EQ(rec_.freed.size(), 1u);
}

TEST_F(StreamBufferTest, ACheckedFreeThatFailsThrowsOnceAndIsNotRetried) {
  rec_.release_status = cudaErrorInvalidValue;
  {
    StreamBuffer buffer(16, stream_, calls());
    try {
      buffer.free();
      ADD_FAILURE() << "a failed cudaFreeAsync was not reported";
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find("release"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(rec_.freed.size(), 1u);
}

TEST_F(StreamBufferTest, AFailedAllocationThrowsAndFreesNothing) {
  rec_.allocate_status = cudaErrorMemoryAllocation;
  try {
    StreamBuffer buffer(16, stream_, calls());
    ADD_FAILURE() << "a refused cudaMallocAsync was not reported";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(rec_.freed.empty());
}

}  // namespace
}  // namespace cleave::testing
