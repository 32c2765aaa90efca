// The host-device boundary and the run's device objects: checks and dispatch (see ops.hpp). Everything above
// the seam that moves data between host and device, or builds a run on a device, comes through here, so
// nothing under engine/train, engine/optim, layers or pipeline includes a CUDA header.
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

namespace {

void check_side(const Context& ctx, std::string_view name, const Tensor& t) {
  CLEAVE_CHECK(t.defined(), "transfer: {} is undefined", name);
  CLEAVE_CHECK(t.device() == ctx.device || t.device().is_cpu(),
               "transfer: {} {} is on {}, but the op runs on {}: each side is on the context's device or the cpu",
               name, t.shape().str(), t.device().str(), ctx.device.str());
}

class CpuStream final : public DeviceStream {
 public:
  const Stream& stream() const override { return cpu_stream(); }
};

// CPU work has finished when it is enqueued, so the point a stream has reached is "now".
class CpuEvent final : public DeviceEvent {
 public:
  void record(const Stream& stream) override {
    CLEAVE_ASSERT(stream.device().is_cpu(), "a cpu event recorded on a {} stream", stream.device().str());
    at_ = std::chrono::steady_clock::now();
    recorded_ = true;
  }
  void wait(const Stream& stream) const override {
    CLEAVE_ASSERT(stream.device().is_cpu(), "a cpu event waited for on a {} stream", stream.device().str());
  }
  void synchronize() const override {}
  bool query() const override { return true; }
  double elapsed_ms_since(const DeviceEvent& start) const override {
    const auto* from = dynamic_cast<const CpuEvent*>(&start);
    CLEAVE_ASSERT(from != nullptr, "elapsed_ms_since: the start event is not a cpu event");
    CLEAVE_ASSERT(recorded_ && from->recorded_, "elapsed_ms_since: an event was never recorded");
    return std::chrono::duration<double, std::milli>(at_ - from->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_;
  bool recorded_ = false;
};

}  // namespace

void transfer(const Context& ctx, const Tensor& src, const Tensor& dst) {
  check_side(ctx, "src", src);
  check_side(ctx, "dst", dst);
  CLEAVE_CHECK(src.dtype() == dst.dtype(), "transfer: src {} is {} and dst {} is {} (convert with ops::copy on one "
               "device)", src.shape().str(), dtype_name(src.dtype()), dst.shape().str(), dtype_name(dst.dtype()));
  check_same_numel("transfer", "src", src, "dst", dst);
  slot_of(ctx, &Backend::transfer, "transfer")(ctx, src, dst);
}

void synchronize(const Context& ctx) {
  const auto slot = slot_of(ctx, &Backend::synchronize, "synchronize");
  note_host_wait(ctx, HostWait::kSynchronize);
  slot(ctx);
}

Tensor to_host(const Context& ctx, const Tensor& src) {
  CLEAVE_CHECK(src.defined(), "to_host: the tensor is undefined");
  Tensor host = Tensor::empty(src.shape(), src.dtype(), src.category(), cpu_allocator());
  transfer(ctx, src, host);
  synchronize(ctx);
  return host;
}

Tensor to_device(const Context& ctx, const Tensor& src, MemoryCategory category) {
  CLEAVE_CHECK(src.defined(), "to_device: the tensor is undefined");
  Tensor device = Tensor::empty(src.shape(), src.dtype(), category, *ctx.allocator);
  transfer(ctx, src, device);
  synchronize(ctx);
  return device;
}

int visible_devices(DeviceType type) {
  if (type == DeviceType::kCpu) return 1;
#if CLEAVE_WITH_CUDA
  return cuda_visible_devices();
#else
  return 0;
#endif
}

void make_device_current(Device device) {
  backend_for(device);  // refuses a device this build cannot serve
#if CLEAVE_WITH_CUDA
  if (device.is_cuda()) make_cuda_device_current(device);
#endif
}

DeviceDescription describe_device(Device device) {
  backend_for(device);
#if CLEAVE_WITH_CUDA
  if (device.is_cuda()) return describe_cuda_device(device);
#endif
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  DeviceDescription d;
  d.name = "cpu";
  d.memory_bytes = pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
  d.details = fmt::format("cpu, {} hardware threads, {:.1f} GiB", std::thread::hardware_concurrency(),
                          static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0));
  return d;
}

std::unique_ptr<DeviceStream> make_device_stream(Device device) {
  backend_for(device);  // refuses a device this build cannot serve
#if CLEAVE_WITH_CUDA
  if (device.is_cuda()) return make_cuda_stream(device);
#endif
  return std::make_unique<CpuStream>();
}

std::unique_ptr<Allocator> make_device_allocator(Device device, const Stream& stream) {
  backend_for(device);
  CLEAVE_ASSERT(stream.device() == device, "make_device_allocator for {} with a stream on {}", device.str(),
                stream.device().str());
#if CLEAVE_WITH_CUDA
  if (device.is_cuda()) return make_cuda_allocator(device, stream);
#endif
  return make_cpu_allocator();
}

std::unique_ptr<Allocator> make_pinned_allocator(Device device) {
  CLEAVE_CHECK(device.is_cuda(), "make_pinned_allocator: pinned memory serves a cuda device, not {}", device.str());
  backend_for(device);
#if CLEAVE_WITH_CUDA
  return make_cuda_pinned_allocator();
#else
  CLEAVE_ASSERT(false, "backend_for served {} in a build without CUDA", device.str());
  return nullptr;
#endif
}

std::unique_ptr<DeviceEvent> make_device_event(Device device) {
  backend_for(device);
#if CLEAVE_WITH_CUDA
  if (device.is_cuda()) return make_cuda_event(device);
#endif
  return std::make_unique<CpuEvent>();
}

}  // namespace cleave::ops
