// See probe_gemm.hpp.
#include "engine/planner/probe_gemm.hpp"

#include <vector>

namespace cleave::planner {
namespace {

constexpr std::int64_t kN = 128;

Tensor operand() {
  const std::vector<float> values(static_cast<std::size_t>(kN * kN), 0.5f);
  return Tensor::from_floats(values, Shape{kN, kN}, MemoryCategory::kWorkspace);
}

}  // namespace

ProbeGemm::ProbeGemm()
    : resources_(ops::make_device_resources(Device::cpu())),
      a_(operand()),
      b_(operand()),
      c_(Tensor::zeros(Shape{kN, kN}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator())) {}

double ProbeGemm::run(int count) {
  const ops::Context ctx{.resources = resources_.get()};
  const auto start = ProfileClock::now();
  for (int g = 0; g < count; ++g) ops::gemm(ctx, a_, b_, c_);
  return seconds_since(start);
}

}  // namespace cleave::planner
