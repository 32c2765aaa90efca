// The seam's events on cuda:0 (ops::DeviceEvent; label gpu, binary gpu_ops_test; compiled, not run on a GPU).
// Asserts: (1) ordering between two non-blocking streams through record/wait: a long chain of ops on stream A
// writes a tensor, stream B waits on an event recorded after it and copies the tensor; B's copy holds A's
// final values (without the wait it would read a stale or partial tensor: the chain is long enough to be
// running when B's copy is enqueued); (2) timing: elapsed_ms_since over the chain is positive and below the host
// time around it, an empty interval is ~0; (3) query reports a recorded point as passed after synchronize;
// (4) check_device_status waits for the stream even when no op has recorded a device status.
#include <gtest/gtest.h>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::event_test {
namespace {

class OpsEventGpu : public OpsParity {};

TEST_F(OpsEventGpu, AnEventOrdersAConsumerStreamAfterTheProducer) {
  auto other = ops::make_device_stream(Device::cuda(0));
  ops::Context consumer = gpu();
  consumer.stream = &other->stream();
  const std::int64_t n = 1 << 22;
  const Tensor x = to_gpu(random({n}, DType::kF32, 0.5f, 1.5f));
  const Tensor copy = poisoned_gpu({n}, DType::kF32);
  // The reference: the same 200 multiplications on the CPU (one f32 rounding each, as on the GPU: equal values).
  const Tensor expected = to_cpu(x);
  for (int k = 0; k < 200; ++k) ops::scale_inplace(cpu(), expected, 1.0001f);
  auto produced = ops::make_device_event(Device::cuda(0));
  auto start = ops::make_device_event(Device::cuda(0));
  start->record(*gpu().stream);
  for (int k = 0; k < 200; ++k) ops::scale_inplace(gpu(), x, 1.0001f);  // ~1.6 GB of traffic: milliseconds
  produced->record(*gpu().stream);
  produced->wait(*consumer.stream);
  ops::copy(consumer, x, copy);
  auto copied = ops::make_device_event(Device::cuda(0));
  copied->record(*consumer.stream);
  copied->synchronize();
  EXPECT_TRUE(produced->query());
  expect_close(expected, copy, 0.0, "the consumer's copy after the producer's event");
  const double chain_ms = produced->elapsed_ms_since(*start);
  EXPECT_GT(chain_ms, 0.0);
  auto again = ops::make_device_event(Device::cuda(0));
  again->record(*gpu().stream);
  again->synchronize();
  EXPECT_GE(again->elapsed_ms_since(*produced), 0.0);
  std::printf("[ gpu ] 200 scale_inplace over 4 Mi f32: %.3f ms between events\n", chain_ms);
}

// check_device_status waits for the stream also before any op has recorded into the device status words (ops.hpp;
// each test's resources are fresh, so none has): the trainer frees the step's pinned uploads right after it, so
// returning early would free host buffers a copy may still read. The chain takes milliseconds on any GPU.
TEST_F(OpsEventGpu, CheckDeviceStatusWaitsForTheStreamWithNothingRecorded) {
  const std::int64_t n = 1 << 22;
  const Tensor x = to_gpu(random({n}, DType::kF32, 0.5f, 1.5f));
  ops::synchronize(gpu());
  auto done = ops::make_device_event(Device::cuda(0));
  for (int k = 0; k < 200; ++k) ops::scale_inplace(gpu(), x, 1.0001f);
  done->record(*gpu().stream);
  ops::check_device_status(gpu());
  EXPECT_TRUE(done->query()) << "check_device_status returned before the stream's work had finished";
}

}  // namespace
}  // namespace cleave::testing::event_test
