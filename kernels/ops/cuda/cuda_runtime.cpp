// The CUDA halves of the seam's device factories (ops.hpp "The run's device"): a run on cuda:N gets a
// non-blocking stream of its own and the caching allocator ordered on that stream, so blocks are reused, and
// tensors zeroed (Tensor::zero_), in the order of the run's work. Compiled, not run on a GPU.
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

void check_visible(Device device, std::string_view what) {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  CLEAVE_CHECK(device.index >= 0 && device.index < probe.count, "{} on {}: {} CUDA device(s) are visible{}{}", what,
               device.str(), probe.count, probe.reason.empty() ? "" : ": ", probe.reason);
}

}  // namespace

int cuda_visible_devices() { return cuda::probe_devices().count; }

std::unique_ptr<DeviceStream> make_cuda_stream(Device device) {
  check_visible(device, "the run's stream");
  return std::make_unique<CudaDeviceStream>(device.index);
}

std::unique_ptr<Allocator> make_cuda_allocator(Device device, const Stream& stream) {
  check_visible(device, "the run's allocator");
  return std::make_unique<cuda::CudaCachingAllocator>(device.index, cuda::native_stream(stream));
}

std::unique_ptr<Allocator> make_cuda_pinned_allocator() { return std::make_unique<cuda::PinnedHostAllocator>(); }

}  // namespace cleave::ops
