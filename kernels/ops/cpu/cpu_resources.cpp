// The CPU backend's per-run state (cpu_resources.hpp): how a run makes it and how a slot finds it.
#include "kernels/ops/cpu/cpu_resources.hpp"

#include <memory>

#include "engine/core/error.hpp"
#include "kernels/ops/backend.hpp"

namespace cleave::ops {
namespace cpu_detail {

CpuResources* cpu_resources(const Context& ctx) {
  if (ctx.resources == nullptr) return nullptr;
  auto* r = dynamic_cast<CpuResources*>(ctx.resources);
  CLEAVE_CHECK(r != nullptr, "ops on {}: the context's resources are another device's (Context::resources; make "
               "them with make_device_resources({}))", ctx.device.str(), ctx.device.str());
  return r;
}

}  // namespace cpu_detail

std::unique_ptr<DeviceResources> make_cpu_resources() { return std::make_unique<cpu_detail::CpuResources>(); }

}  // namespace cleave::ops
