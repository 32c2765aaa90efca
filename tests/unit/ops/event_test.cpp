// The seam's events on the CPU (ops::DeviceEvent, ops.hpp "Events"): CPU work has finished when enqueued, so an
// event notes the host's steady clock when recorded; wait and synchronize return at once; elapsed_ms_since is
// the difference of two readings. A device this build or machine cannot serve is refused with a message. The
// CUDA half is tested on a GPU (tests/gpu/ops/event_test.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::testing::event_test {
namespace {

TEST(OpsEvent, CpuEventsMeasureTheHostClockBetweenRecords) {
  auto start = ops::make_device_event(Device::cpu());
  auto end = ops::make_device_event(Device::cpu());
  EXPECT_TRUE(start->query());  // never recorded counts as passed
  start->record(cpu_stream());
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end->record(cpu_stream());
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  end->wait(cpu_stream());
  end->synchronize();
  EXPECT_TRUE(end->query());
  const double ms = end->elapsed_ms_since(*start);
  EXPECT_GE(ms, 20.0);
  EXPECT_LE(ms, host_ms + 1.0);
  EXPECT_NEAR(end->elapsed_ms_since(*end), 0.0, 0.0);
  EXPECT_LT(start->elapsed_ms_since(*end), -19.0);  // signed: the other way round is negative
  start->record(cpu_stream());                      // re-recording moves the point
  EXPECT_LT(end->elapsed_ms_since(*start), 0.0);
}

TEST(OpsEvent, UnrecordedEventsAndForeignDevicesAreRefused) {
  auto recorded = ops::make_device_event(Device::cpu());
  auto never = ops::make_device_event(Device::cpu());
  recorded->record(cpu_stream());
  EXPECT_THROW(recorded->elapsed_ms_since(*never), InternalError);
  EXPECT_THROW(never->elapsed_ms_since(*recorded), InternalError);
  // cuda:7: refused by a build without CUDA (naming the reason) or by a machine without that device.
  if (ops::visible_devices(DeviceType::kCuda) < 8) {
    EXPECT_THROW(ops::make_device_event(Device::cuda(7)), Error);
  }
}

// make_device_current (ops.hpp "The run's device"), which a run calls before it makes its stream: the CPU has no
// current device (a no-op, repeatable); a cuda device this build or machine cannot serve is refused naming the
// device and, in a CUDA build, the visible count (rank_setup.cpp calls it for cuda:<local rank>).
TEST(OpsDevice, MakeDeviceCurrentIsANoOpOnTheCpuAndRefusesAnInvisibleDevice) {
  EXPECT_NO_THROW(ops::make_device_current(Device::cpu()));
  EXPECT_NO_THROW(ops::make_device_current(Device::cpu()));
  const int visible = ops::visible_devices(DeviceType::kCuda);
  if (visible >= 8) GTEST_SKIP() << visible << " CUDA devices are visible: cuda:7 exists";
  try {
    ops::make_device_current(Device::cuda(7));
    ADD_FAILURE() << "make_device_current(cuda:7) accepted with " << visible << " CUDA device(s) visible";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:7"), std::string::npos) << what;
    if (CLEAVE_WITH_CUDA) {
      EXPECT_NE(what.find(std::to_string(visible) + " CUDA device(s) are visible"), std::string::npos) << what;
    }
  }
}

// describe_device (ops.hpp "The run's device"), which measured profiles name the device by: the CPU's is "cpu" with
// the machine's memory; a cuda device this build or machine cannot serve is refused naming the count.
TEST(OpsDevice, DescribesTheCpuAndRefusesAnInvisibleDevice) {
  const ops::DeviceDescription cpu = ops::describe_device(Device::cpu());
  EXPECT_EQ(cpu.name, "cpu");
  EXPECT_GT(cpu.memory_bytes, 0);
  EXPECT_NE(cpu.details.find("hardware threads"), std::string::npos) << cpu.details;
  if (ops::visible_devices(DeviceType::kCuda) < 8) {
    EXPECT_THROW(ops::describe_device(Device::cuda(7)), Error);
  }
}

}  // namespace
}  // namespace cleave::testing::event_test
