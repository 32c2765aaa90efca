// Internal to the CPU backend: f32 pointers for the f32 kernels of kernels/cpu, whatever the tensor's dtype.
//
// This is where bf16 storage meets f32 arithmetic on the CPU (the numerical reference for the GPU path):
// an f32 tensor is used in place at no cost; a bf16 tensor is widened into f32 scratch from the context's
// allocator (kWorkspace) and, for an output, narrowed back (round to nearest even) when the view ends.
// An undefined tensor gives a null pointer (optional arguments such as a missing bias).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/tensor.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/ops/context.hpp"

namespace cleave::ops::cpu_detail {

inline std::uint16_t* bf16_data(const Tensor& t) { return static_cast<std::uint16_t*>(t.raw_data()); }

class F32In {
 public:
  F32In(const Context& ctx, const Tensor& t) {
    if (!t.defined()) return;
    if (t.dtype() == DType::kF32) {
      ptr_ = t.data<float>();
      return;
    }
    scratch_ = Tensor::empty(t.shape(), DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
    kernels::cpu::cast_bf16_to_f32(bf16_data(t), scratch_.data<float>(), t.numel());
    ptr_ = scratch_.data<float>();
  }
  const float* get() const { return ptr_; }

 private:
  Tensor scratch_;
  const float* ptr_ = nullptr;
};

class F32Out {
 public:
  // read: the kernel reads the output's old values (+=, beta != 0, in place); otherwise it only writes.
  F32Out(const Context& ctx, const Tensor& t, bool read) : target_(t) {
    if (!t.defined()) return;
    if (t.dtype() == DType::kF32) {
      ptr_ = t.data<float>();
      return;
    }
    scratch_ = Tensor::empty(t.shape(), DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
    ptr_ = scratch_.data<float>();
    if (read) kernels::cpu::cast_bf16_to_f32(bf16_data(t), ptr_, t.numel());
  }
  ~F32Out() {
    if (scratch_.defined()) kernels::cpu::cast_f32_to_bf16(ptr_, bf16_data(target_), target_.numel());
  }
  F32Out(const F32Out&) = delete;
  F32Out& operator=(const F32Out&) = delete;
  float* get() const { return ptr_; }

 private:
  Tensor target_;
  Tensor scratch_;
  float* ptr_ = nullptr;
};

// f32 pointers for the inputs of one multi-tensor kernel call (the sums of squares, the optimizer updates): an f32
// tensor in place, a bf16 one widened whole as F32In alone; the widened copies live as long as this object.
class F32Inputs {
 public:
  explicit F32Inputs(const Context& ctx) : ctx_(ctx) {}
  const float* view(const Tensor& t) {
    if (t.dtype() == DType::kF32) return t.data<float>();
    return widened_.emplace_back(std::make_unique<F32In>(ctx_, t))->get();
  }

 private:
  const Context& ctx_;
  std::vector<std::unique_ptr<F32In>> widened_;
};

}  // namespace cleave::ops::cpu_detail
