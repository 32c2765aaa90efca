// The CUDA halves of the seam's device factories (ops.hpp "The run's device"): a run on cuda:N gets a
// non-blocking stream of its own and the caching allocator ordered on that stream, so blocks are reused, and
// tensors zeroed (Tensor::zero_), in the order of the run's work; events for ordering and timing on the device;
// what the device is (describe_device).
// Compiled, not run on a GPU.
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/ops/backend.hpp"

namespace cleave::ops {
namespace {

class CudaDeviceStream final : public DeviceStream {
 public:
  explicit CudaDeviceStream(int device) : stream_(device) {}
  const Stream& stream() const override { return stream_.stream(); }

 private:
  cuda::CudaStream stream_;
};

// Timing enabled: the measured timeline reads elapsed times (a timing event costs a little more to record).
class CudaDeviceEvent final : public DeviceEvent {
 public:
  explicit CudaDeviceEvent(int device) : event_(device, /*timing=*/true) {}
  void record(const Stream& stream) override { event_.record(stream); }
  void wait(const Stream& stream) const override { event_.wait(stream); }
  void synchronize() const override { event_.synchronize(); }
  bool query() const override { return event_.query(); }
  double elapsed_ms_since(const DeviceEvent& start) const override {
    const auto* from = dynamic_cast<const CudaDeviceEvent*>(&start);
    CLEAVE_ASSERT(from != nullptr, "elapsed_ms_since: the start event is not a cuda event");
    return cuda::CudaEvent::elapsed_ms(from->event_, event_);
  }

 private:
  cuda::CudaEvent event_;
};

void check_visible(Device device, std::string_view what) {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  CLEAVE_CHECK(device.index >= 0 && device.index < probe.count, "{} on {}: {} CUDA device(s) are visible{}{}", what,
               device.str(), probe.count, probe.reason.empty() ? "" : ": ", probe.reason);
}

}  // namespace

int cuda_visible_devices() { return cuda::probe_devices().count; }

void make_cuda_device_current(Device device) {
  check_visible(device, "make_device_current");
  cuda::set_device(device.index);
}

DeviceDescription describe_cuda_device(Device device) {
  check_visible(device, "describe_device");
  const cuda::DeviceInfo info = cuda::device_info(device.index);
  return {info.name, info.str() + "; " + cuda::library_versions(), info.total_memory};
}

std::unique_ptr<DeviceStream> make_cuda_stream(Device device) {
  check_visible(device, "the run's stream");
  return std::make_unique<CudaDeviceStream>(device.index);
}

std::unique_ptr<Allocator> make_cuda_allocator(Device device, const Stream& stream) {
  check_visible(device, "the run's allocator");
  return std::make_unique<cuda::CudaCachingAllocator>(device.index, cuda::native_stream(stream));
}

std::unique_ptr<Allocator> make_cuda_pinned_allocator() { return std::make_unique<cuda::PinnedHostAllocator>(); }

std::unique_ptr<DeviceEvent> make_cuda_event(Device device) {
  check_visible(device, "an event");
  return std::make_unique<CudaDeviceEvent>(device.index);
}

}  // namespace cleave::ops
