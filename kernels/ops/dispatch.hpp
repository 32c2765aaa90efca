// Internal to the seam: the argument checks every public op shares, and the lookup of an op's slot in the
// backend of the context's device (a null slot is the "not implemented on <device>" error).
#pragma once

#include <initializer_list>
#include <string_view>

#include "engine/core/error.hpp"
#include "kernels/ops/backend.hpp"

namespace cleave::ops::detail {

// Defined and on ctx.device.
void check_on(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t);
// check_on, and f32 or bf16.
void check_float(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t);
// check_on, and exactly `dtype`.
void check_dtype(const Context& ctx, std::string_view op, std::string_view name, const Tensor& t, DType dtype);
void check_same_numel(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                      const Tensor& b);
void check_numel(std::string_view op, std::string_view name, const Tensor& t, std::int64_t numel);

// A tensor under the name an op's messages give it.
struct Named {
  std::string_view name;
  const Tensor& tensor;
};
// check_float of each tensor, in the order given (the first bad one is the one named).
void check_floats(const Context& ctx, std::string_view op, std::initializer_list<Named> tensors);
// check_same_numel(op, reference, other) for each other tensor, in the order given.
void check_same_numels(std::string_view op, Named reference, std::initializer_list<Named> others);
[[noreturn]] void throw_not_implemented(std::string_view op, Device device, const char* backend);
// ops::gemm's checks and size resolution (ops_gemm.cpp): the GemmProblem its slot receives.
GemmProblem resolve_gemm(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                         const GemmOptions& options);

// Notes one host wait of `kind` in the run's counter (Context::host_waits), if it has one.
inline void note_host_wait(const Context& ctx, HostWait kind) {
  if (ctx.host_waits != nullptr) ctx.host_waits->note(kind);
}

template <typename Slot>
Slot slot_of(const Context& ctx, Slot Backend::*member, std::string_view op) {
  const Backend& backend = backend_of(ctx);
  Slot slot = backend.*member;
  if (slot == nullptr) throw_not_implemented(op, ctx.device, backend.name);
  return slot;
}

}  // namespace cleave::ops::detail
