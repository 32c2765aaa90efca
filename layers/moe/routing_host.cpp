// See routing_host.hpp: the MoE layer's routing data between the host and ctx.device. The one rule kept here is
// upload_async's (below): a host staging block is handed to the caller, never freed, while a copy may still read it.
#include "layers/moe/routing_host.hpp"

#include <cstring>
#include <utility>

#include "engine/core/allocator.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::layers {
namespace {

// The forward's routing tensors on ctx.device, each copied from a host staging tensor of ctx.staging_allocator()
// (page-locked on a GPU) without a host wait: the staging goes to `staging`, which the forward keeps in its stash
// until the backward has waited for the stream (its read-back of the weights' gradient), so no copy reads a
// staging block after it has been handed to a new owner. On the CPU the copy has finished on return and
// `staging` stays empty, unless the context has a staging allocator of its own (a test's counting allocator:
// then the CPU keeps it as a GPU does, so the memory plan's host_pinned figure can be checked on the CPU).
template <typename T>
Tensor upload_async(const Context& ctx, const std::vector<T>& values, const Shape& shape, DType dtype,
                    Tensor& staging) {
  Tensor host = Tensor::empty(shape, dtype, MemoryCategory::kActivations, ctx.staging_allocator());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  Tensor device = Tensor::empty(shape, dtype, MemoryCategory::kActivations, *ctx.allocator);
  ops::transfer(ctx, host, device);
  if (!ctx.device.is_cpu() || ctx.upload_staging != nullptr) staging = std::move(host);
  return device;
}

}  // namespace

Tensor upload_floats(const Context& ctx, std::span<const float> values, const Shape& shape) {
  Tensor host = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(float));
  return ops::to_device(ctx, host, MemoryCategory::kActivations);
}

std::span<const float> host_floats(const Tensor& t, std::vector<float>& buffer) {
  if (t.dtype() == DType::kF32) return t.span<float>();
  CLEAVE_ASSERT(t.dtype() == DType::kBF16 && t.device().is_cpu(), "host_floats of a {} tensor on {}",
                dtype_name(t.dtype()), t.device().str());
  buffer.resize(static_cast<std::size_t>(t.numel()));
  const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = bf16_to_float(p[i]);
  return buffer;
}

RoutingTensors upload_routing(const Context& ctx, const Routing& routing, bool backward_follows) {
  const std::int64_t n = routing.tokens, k = routing.top_k, r = n * k;
  RoutingTensors t;
  t.row_token = upload_async(ctx, routing.row_token, Shape{r}, DType::kI32, t.staging[0]);
  t.token_row = upload_async(ctx, routing.token_row, Shape{n, k}, DType::kI32, t.staging[1]);
  t.weight = upload_async(ctx, routing.weight, Shape{n, k}, DType::kF32, t.staging[2]);
  t.row_weight = upload_async(ctx, routing.row_weight, Shape{r}, DType::kF32, t.staging[3]);
  if (!backward_follows) {  // empty slots after the wait, as on the CPU without a staging allocator
    ops::synchronize(ctx);
    t.staging = {};
  }
  return t;
}

Tensor counts_to_tensor(const std::vector<std::int64_t>& counts) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(counts.size())}, DType::kF32, MemoryCategory::kActivations,
                           cpu_allocator());
  for (std::size_t i = 0; i < counts.size(); ++i) t.data<float>()[i] = static_cast<float>(counts[i]);
  return t;
}

}  // namespace cleave::layers
