// engine/cuda/caching_allocator.hpp's failure handling on the CPU: which cudaMalloc / cudaHostAlloc statuses are an
// out-of-memory (returned to the base allocator as a refusal: OutOfMemoryError) and which are faults (a
// BackendError with CUDA's text). CUDA reports an earlier kernel's sticky fault at the next call, cudaMalloc
// included; read as an out-of-memory it would hide an illegal address behind "the system refused ..." and keep
// gpu-check.sh's sticky-error rerun and memcheck from starting. The message texts need no device
// (cudaGetErrorString and cudaGetErrorName are table look-ups).
#include <gtest/gtest.h>

#include <string>

#include "engine/cuda/caching_allocator.hpp"

namespace cleave::testing::allocation_failure_test {
namespace {

using cuda::AllocationFailure;
using cuda::classify_allocation_failure;

TEST(AllocationFailure, OnlyMemoryAllocationIsAnOutOfMemory) {
  EXPECT_EQ(classify_allocation_failure(cudaErrorMemoryAllocation), AllocationFailure::kOutOfMemory);
  for (const cudaError_t status : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress,
                                   cudaErrorAssert, cudaErrorIllegalInstruction, cudaErrorNoDevice,
                                   cudaErrorInsufficientDriver, cudaErrorInvalidValue, cudaErrorInitializationError}) {
    EXPECT_EQ(classify_allocation_failure(status), AllocationFailure::kFault) << cudaGetErrorName(status);
  }
}

TEST(AllocationFailure, FaultMessageNamesTheCallTheRequestAndCudasError) {
  const std::string msg =
      cuda::allocation_fault_message("cudaMalloc", std::size_t{3} << 20, "cuda:1", cudaErrorIllegalAddress);
  EXPECT_NE(msg.find("cudaMalloc of 3.00 MiB on cuda:1 failed: an illegal memory access was encountered "
                     "(cudaErrorIllegalAddress)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Not an out-of-memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("compute-sanitizer"), std::string::npos) << msg;
}

TEST(AllocationFailure, CacheReleaseWarningNamesTheSizesAndTheHazard) {
  MemoryStats stats;
  stats.current_total = std::int64_t{70} << 30;
  stats.reserved = std::int64_t{75} << 30;
  const std::string msg = cuda::cache_release_warning("cuda:0", std::size_t{1} << 30, stats);
  EXPECT_NE(msg.find("cuda:0: cudaMalloc of 1.00 GiB ran out of memory (70.00 GiB in use, 75.00 GiB reserved); "
                     "returning the cached blocks to CUDA and retrying"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("comm timeout"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Out of memory on a GPU"), std::string::npos) << msg;
}

}  // namespace
}  // namespace cleave::testing::allocation_failure_test
