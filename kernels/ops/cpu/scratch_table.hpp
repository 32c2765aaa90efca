// A table of plain values one CPU slot call hands its kernel (a multi-tensor update's tensor list, a sum's spans),
// kept in the run's kernel scratch (cpu_resources.hpp, kernels/cpu/kernel_scratch.hpp) rather than a std::vector:
// once the scratch has grown to the largest table (a run's first step) a call allocates nothing.
// Invariant: the table holds the scratch's lease for the call, so no kernel that leases the scratch itself may run
// while it lives (the multi-tensor kernels lease none); a context without resources gets scratch of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include "engine/core/error.hpp"
#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"

namespace cleave::ops::cpu_detail {

template <typename T>
class ScratchTable {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  ScratchTable(const Context& ctx, std::size_t capacity)
      : scratch_(cpu_scratch(ctx)), lease_(scratch_.get().lease(capacity * sizeof(T), 0)), capacity_(capacity) {}
  ScratchTable(const ScratchTable&) = delete;
  ScratchTable& operator=(const ScratchTable&) = delete;

  void push_back(const T& value) {
    CLEAVE_ASSERT(size_ < capacity_, "ScratchTable: more than its {} entries", capacity_);
    ::new (lease_.shared() + size_ * sizeof(T)) T(value);
    ++size_;
  }
  const T* data() const { return std::launder(reinterpret_cast<const T*>(lease_.shared())); }
  std::int64_t size() const { return static_cast<std::int64_t>(size_); }

 private:
  kernels::cpu::ScratchFor scratch_;
  kernels::cpu::KernelScratch::Lease lease_;
  std::size_t capacity_;
  std::size_t size_ = 0;
};

}  // namespace cleave::ops::cpu_detail
