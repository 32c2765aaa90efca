// The seam's shared checks and backend registry (see dispatch.hpp, backend.hpp).
#include "kernels/ops/dispatch.hpp"

#include "engine/core/error.hpp"

namespace cleave::ops {

const Backend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::kCpu:
      return cpu_backend();
    case DeviceType::kCuda:
#if CLEAVE_WITH_CUDA
      return cuda_backend();
#else
      CLEAVE_THROW("{}: this cleave was built without CUDA (CMake found no CUDA toolkit, cuDNN or NCCL; "
                   "`cleave version` says which), so it runs on the cpu only",
                   device.str());
#endif
  }
  CLEAVE_ASSERT(false, "unknown device type {}", static_cast<int>(device.type));
}

const Backend& backend_of(const Context& ctx) {
  return ctx.backend != nullptr ? *ctx.backend : backend_for(ctx.device);
}

void check_device_status(const Context& ctx) {
  const auto slot = detail::slot_of(ctx, &Backend::check_device_status, "check_device_status");
  detail::note_host_wait(ctx, HostWait::kDeviceStatus);
  slot(ctx);
}

std::unique_ptr<DeviceResources> make_device_resources(Device device) {
  backend_for(device);  // refuses a device this build cannot serve
#if CLEAVE_WITH_CUDA
  if (device.is_cuda()) return make_cuda_resources(device);
#endif
  return make_cpu_resources();
}

namespace detail {

void check_on(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t) {
  CLEAVE_CHECK(t.defined(), "{}: {} is undefined", op, name);
  CLEAVE_CHECK(t.device() == ctx.device, "{}: {} {} is on {}, but the op runs on {} (the context's device)", op, name,
               t.shape().str(), t.device().str(), ctx.device.str());
}

void check_float(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t) {
  check_on(ctx, op, name, t);
  CLEAVE_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16, "{}: {} {} is {}; expected f32 or bf16", op,
               name, t.shape().str(), dtype_name(t.dtype()));
}

void check_dtype(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t, DType dtype) {
  check_on(ctx, op, name, t);
  CLEAVE_CHECK(t.dtype() == dtype, "{}: {} {} is {}; expected {}", op, name, t.shape().str(), dtype_name(t.dtype()),
               dtype_name(dtype));
}

void check_same_numel(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                      const Tensor& b) {
  CLEAVE_CHECK(a.numel() == b.numel(), "{}: {} {} and {} {} differ in size", op, a_name, a.shape().str(), b_name,
               b.shape().str());
}

void check_numel(std::string_view op, std::string_view name, const Tensor& t, std::int64_t numel) {
  CLEAVE_CHECK(t.numel() == numel, "{}: {} {} should hold {} elements", op, name, t.shape().str(), numel);
}

void check_floats(const Context& ctx, std::string_view op, std::initializer_list<Named> tensors) {
  for (const Named& t : tensors) check_float(ctx, op, t.name, t.tensor);
}

void check_same_numels(std::string_view op, Named reference, std::initializer_list<Named> others) {
  for (const Named& t : others) check_same_numel(op, reference.name, reference.tensor, t.name, t.tensor);
}

void throw_not_implemented(std::string_view op, Device device, const char* backend) {
  CLEAVE_THROW("{} is not implemented on {} (the {} backend has no kernel for it yet)", op, device.str(), backend);
}

}  // namespace detail
}  // namespace cleave::ops
