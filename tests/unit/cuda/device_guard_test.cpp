// engine/cuda/device.hpp's DeviceGuard on the CPU, with stand-ins for cudaGetDevice / cudaSetDevice and the primary
// context query (as CUDA 12 and later behave: setting a device initializes its primary context). A guard restores
// the previous device only when that device has a context; otherwise the scope's device stays current, so a rank of
// cuda:1 whose thread still had the default cuda:0 never makes a context on GPU 0 (hundreds of MiB per rank there,
// or, in exclusive-process mode, a failed cudaSetDevice left as the next launch's error). The nothrow form keeps the
// current device when it cannot set another.
#include <gtest/gtest.h>

#include <new>
#include <set>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::testing::device_guard_test {
namespace {

// The simulated thread and process (plain function pointers cannot capture: one per test, set by the fixture).
struct Simulated {
  int current = 0;             // the thread's current device (CUDA's default: 0)
  std::set<int> contexts;      // devices whose primary context is initialized
  std::vector<int> set_calls;  // every cudaSetDevice argument, in order
  cudaError_t set_status = cudaSuccess;
};
Simulated* sim = nullptr;

cudaError_t fake_get_device(int* device) {
  *device = sim->current;
  return cudaSuccess;
}
cudaError_t fake_set_device(int device) {
  sim->set_calls.push_back(device);
  if (sim->set_status != cudaSuccess) return sim->set_status;
  sim->current = device;
  sim->contexts.insert(device);  // CUDA 12+: cudaSetDevice initializes the primary context
  return cudaSuccess;
}
bool fake_context_active(int device) noexcept { return sim->contexts.count(device) > 0; }

class DeviceGuardTest : public ::testing::Test {
 protected:
  void SetUp() override { sim = &sim_; }
  void TearDown() override { sim = nullptr; }
  static cuda::DeviceCalls calls() { return {fake_get_device, fake_set_device, fake_context_active}; }
  Simulated sim_;
};

TEST_F(DeviceGuardTest, RestoresAPreviousDeviceThatHasAContext) {
  sim_.contexts = {0};
  { cuda::DeviceGuard guard(1, calls()); }
  EXPECT_EQ(sim_.current, 0);
  EXPECT_EQ(sim_.set_calls, (std::vector<int>{1, 0}));
}

// The NCCL world of rank 1 is built before the rank makes cuda:1 current: the thread's device is the default 0,
// which this process never used. The guard must not restore it (that would initialize a context on GPU 0).
TEST_F(DeviceGuardTest, LeavesItsDeviceCurrentRatherThanInitializeAnUnusedOne) {
  { cuda::DeviceGuard guard(1, calls()); }
  EXPECT_EQ(sim_.current, 1);
  EXPECT_EQ(sim_.contexts, (std::set<int>{1})) << "a context was made on a device the rank does not use";
  EXPECT_EQ(sim_.set_calls, (std::vector<int>{1}));
  { cuda::DeviceGuard guard(1, std::nothrow, calls()); }  // already current: nothing to set or restore
  EXPECT_EQ(sim_.set_calls, (std::vector<int>{1}));
}

TEST_F(DeviceGuardTest, NothrowFormKeepsTheCurrentDeviceWhenItCannotSetAnother) {
  sim_.contexts = {0};
  sim_.set_status = cudaErrorInvalidDevice;
  { cuda::DeviceGuard guard(3, std::nothrow, calls()); }
  EXPECT_EQ(sim_.current, 0);
  EXPECT_EQ(sim_.set_calls, (std::vector<int>{3}));  // tried once, nothing restored
  EXPECT_THROW(cuda::DeviceGuard(3, calls()), Error);  // the checked form names the failure
}

// The real query on this machine (with or without a driver or a GPU): an answer, never a throw, and no error of its
// own left for the next checked call (a host without a driver keeps cudaErrorInsufficientDriver whatever is
// cleared: the same before and after); a device that cannot be asked about counts as having a context.
TEST(PrimaryContext, QueryAnswersWithoutLeavingAnError) {
  const cudaError_t before = cudaGetLastError();
  EXPECT_TRUE(cuda::primary_context_active(1 << 20));  // no such device: unknown, so true
  (void)cuda::primary_context_active(0);
  EXPECT_EQ(cudaGetLastError(), before);
}

}  // namespace
}  // namespace cleave::testing::device_guard_test
