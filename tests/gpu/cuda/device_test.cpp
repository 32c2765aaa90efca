// engine/cuda devices, streams, events and copies on a real device: properties and library versions, device
// errors that name the count, the device guard, event ordering between two streams (the second stream's copy
// sees the first stream's writes only through the event), event queries (a pending one leaves no error behind)
// and timing, host <-> device copies of whole tensors, slices and pinned buffers, and the assertions that catch
// CPU streams given to CUDA work, CUDA streams given to the engine/core CPU stream and event, and mismatched
// copies.
#include "engine/cuda/device.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/cuda/copy.hpp"
#include "engine/cuda/stream.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::device_test {
namespace {

using CudaDevice = CudaTest;

TEST_F(CudaDevice, InfoAndVersions) {
  const cuda::DeviceInfo info = cuda::device_info(0);
  EXPECT_GE(info.major, 7);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory, std::int64_t{1} << 30);
  EXPECT_NE(info.str().find("cuda:0"), std::string::npos) << info.str();
  const std::string versions = cuda::library_versions();
  EXPECT_NE(versions.find("cuDNN 9."), std::string::npos) << versions;
  EXPECT_EQ(versions.find("no driver"), std::string::npos) << versions;
}

TEST_F(CudaDevice, BadIndexNamesTheDeviceCount) {
  const int count = cuda::device_count();
  try {
    cuda::set_device(count);
    FAIL() << "set_device(" << count << ") did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(count) + " CUDA device(s) are visible"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cuda::CudaCachingAllocator(-1), Error);
}

TEST_F(CudaDevice, GuardRestoresTheCurrentDevice) {
  const int count = cuda::device_count();
  const int other = count > 1 ? 1 : 0;
  cuda::set_device(0);
  {
    cuda::DeviceGuard guard(other);
    EXPECT_EQ(cuda::current_device(), other);
  }
  EXPECT_EQ(cuda::current_device(), 0);  // cuda:0 has a context (set_device made it): restored
  EXPECT_TRUE(cuda::primary_context_active(0));
}

// A stream belongs to the current device (stream.hpp): one for another device is refused naming both; one for the
// current device is made and works. With two GPUs the request is cuda:0 while cuda:1 is current; with one it is
// cuda:1 while cuda:0 is current (the check refuses it before any CUDA call touches cuda:1, which need not exist),
// so the test runs, and does not skip, on a one-GPU machine (gpu-check.sh fails a stage whose tests skip while a
// GPU is visible).
TEST_F(CudaDevice, StreamOfADeviceThatIsNotCurrentIsRefused) {
  cuda::set_device(0);
  EXPECT_NO_THROW(cuda::CudaStream(0).synchronize());
  const bool two = cuda::device_count() >= 2;
  const int current = two ? 1 : 0, requested = two ? 0 : 1;
  cuda::set_device(current);
  try {
    cuda::CudaStream wrong(requested);
    ADD_FAILURE() << "a stream for cuda:" << requested << " was made while cuda:" << current << " was current";
  } catch (const InternalError& e) {
    const std::string want = "cuda:" + std::to_string(requested) + " was requested while cuda:" +
                             std::to_string(current) + " is the current device";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  cuda::set_device(0);
}

TEST_F(CudaDevice, EventOrdersASecondStreamAfterTheFirst) {
  const int64_t n = int64_t{1} << 24;  // 64 MiB: long enough that an unordered copy would see old bytes
  cuda::CudaStream producer(0);
  cuda::CudaStream consumer(0, cuda::StreamPriority::kHigh);
  Tensor source = poisoned(n);
  Tensor target = poisoned(n);
  sync();
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(source.raw_data(), 0x3f, source.nbytes(), producer.native()));
  cuda::CudaEvent written(0);
  written.record(producer.stream());
  written.wait(consumer.stream());
  cuda::copy_async(target, source, consumer.stream());
  consumer.synchronize();
  EXPECT_TRUE(written.query());
  const auto got = download<std::uint32_t>(target);
  int64_t wrong = 0;
  for (std::uint32_t v : got) wrong += v != 0x3f3f3f3fu ? 1 : 0;
  EXPECT_EQ(wrong, 0) << "the consumer stream did not wait for the producer's event";
  producer.synchronize();
}

TEST_F(CudaDevice, EventTimingAndQuery) {
  cuda::CudaEvent start(0, /*timing=*/true);
  cuda::CudaEvent end(0, /*timing=*/true);
  Tensor t = poisoned(int64_t{1} << 22);
  start.record(engine_stream());
  cuda::fill_bytes_async(t, 0, engine_stream());
  end.record(engine_stream());
  const float ms = cuda::CudaEvent::elapsed_ms(start, end);
  EXPECT_GE(ms, 0.0f);
  EXPECT_TRUE(end.query());
  cuda::CudaEvent untimed(0);
  EXPECT_TRUE(untimed.query()) << "an event never recorded counts as complete";
  EXPECT_THROW(cuda::CudaEvent::elapsed_ms(start, untimed), InternalError);
  cuda::CudaEvent moved = std::move(start);
  EXPECT_NE(moved.native(), nullptr);
}

// A pending event's not-ready answer is an answer: query_event (the tree's one cudaEventQuery, used by CudaEvent,
// NcclWork::test and the NCCL watchdog thread) must not leave it as the thread's last error, or the next launch
// check reports "device not ready" as its own failure.
TEST_F(CudaDevice, PendingQueryLeavesNoErrorBehind) {
  cuda::CudaStream held(0);
  std::atomic<bool> open{false};
  auto hold = [](void* flag) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!static_cast<std::atomic<bool>*>(flag)->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  };
  CLEAVE_CUDA_CHECK(cudaLaunchHostFunc(held.native(), hold, &open));
  cuda::CudaEvent behind(0);
  behind.record(held.stream());
  EXPECT_EQ(cuda::query_event(behind.native()), cudaErrorNotReady);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "query_event left not-ready as the thread's last error";
  EXPECT_FALSE(behind.query());
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "CudaEvent::query left not-ready as the thread's last error";
  open = true;
  held.synchronize();
  EXPECT_EQ(cuda::query_event(behind.native()), cudaSuccess);
}

TEST_F(CudaDevice, CopiesRoundTripWholeTensorsSlicesAndPinnedBuffers) {
  const auto values = random_floats(6 * 7);
  const Tensor host = Tensor::from_floats(values, Shape{6, 7});
  const Tensor dev = cuda::to_device(host, allocator(), MemoryCategory::kActivations, engine_stream());
  EXPECT_TRUE(dev.device().is_cuda());
  expect_bitwise_equal(cuda::to_host(dev, engine_stream()).to_floats(), values, "round trip");

  const Tensor rows = cuda::to_host(dev.slice(2, 5), engine_stream());  // a view at a byte offset
  const std::vector<float> want_rows(values.begin() + 14, values.begin() + 35);
  expect_bitwise_equal(rows.to_floats(), want_rows, "slice rows [2, 5)");

  const Tensor dev_copy = Tensor::empty(Shape{6, 7}, DType::kF32, MemoryCategory::kActivations, allocator());
  cuda::copy(dev_copy, dev, engine_stream());  // device -> device
  expect_bitwise_equal(cuda::to_host(dev_copy, engine_stream()).to_floats(), values, "device to device");

  cuda::PinnedHostAllocator pinned;
  const Tensor staging = Tensor::empty(Shape{6, 7}, DType::kF32, MemoryCategory::kCommunication, pinned);
  EXPECT_TRUE(staging.device().is_cpu());
  cudaPointerAttributes attributes{};
  CLEAVE_CUDA_CHECK(cudaPointerGetAttributes(&attributes, staging.raw_data()));
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost) << "PinnedHostAllocator memory is not page-locked";
  cuda::copy_async(staging, dev, engine_stream());
  sync();
  expect_bitwise_equal(staging.to_floats(), values, "device to pinned host");
}

TEST_F(CudaDevice, MisuseIsCaught) {
  EXPECT_THROW(cuda::native_stream(cpu_stream()), InternalError);
  cuda::synchronize(cpu_stream());  // a CPU stream is always idle
  const Tensor a = Tensor::empty(Shape{4}, DType::kF32, MemoryCategory::kActivations, allocator());
  const Tensor b = Tensor::empty(Shape{5}, DType::kF32, MemoryCategory::kActivations, allocator());
  const Tensor c = Tensor::empty(Shape{4}, DType::kI32, MemoryCategory::kActivations, allocator());
  EXPECT_THROW(cuda::copy_async(a, b, engine_stream()), InternalError);
  EXPECT_THROW(cuda::copy_async(a, c, engine_stream()), InternalError);
  cuda::CudaEvent event(0);
  EXPECT_THROW(event.record(cpu_stream()), InternalError);
  // The engine/core CPU no-ops refuse a CUDA stream rather than silently not waiting for it.
  EXPECT_THROW(engine_stream().synchronize(), InternalError);
  Event cpu_event;
  EXPECT_THROW(cpu_event.record(engine_stream()), InternalError);
}

}  // namespace
}  // namespace cleave::testing::device_test
