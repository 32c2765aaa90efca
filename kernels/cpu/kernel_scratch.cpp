// Scratch a CPU kernel call borrows (kernel_scratch.hpp): the layout of a lease and when the memory grows.
#include "kernels/cpu/kernel_scratch.hpp"

#include <omp.h>

#include <new>

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu {
namespace {

constexpr std::size_t kAlign = 64;  // a cache line

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void KernelScratch::Free::operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kAlign}); }

KernelScratch::Lease KernelScratch::lease(std::size_t shared_bytes, std::size_t thread_floats) {
  CLEAVE_ASSERT(!leased_.exchange(true, std::memory_order_acquire),
                "KernelScratch: leased by two calls at once (a scratch serves one call at a time)");
  const int slots = omp_in_parallel() ? 1 : omp_get_max_threads();
  const std::size_t shared = round_up(shared_bytes, kAlign);
  const std::size_t stride = round_up(thread_floats, kAlign / sizeof(float));
  const std::size_t need = shared + static_cast<std::size_t>(slots) * stride * sizeof(float);
  if (need > bytes_) {
    data_.reset();  // before the new block: the old contents are never needed
    data_.reset(static_cast<std::byte*>(::operator new[](need, std::align_val_t{kAlign})));
    bytes_ = need;
    ++growths_;
  }
  ++leases_;
  return Lease(*this, data_.get(), reinterpret_cast<float*>(data_.get() + shared), stride, slots);
}

KernelScratch::Lease::~Lease() { owner_.leased_.store(false, std::memory_order_release); }

float* KernelScratch::Lease::thread_block() const {
  // The call's team has at most slots_ threads (omp_get_max_threads() on the thread that leased, outside any
  // region), so a number past that is an outer team's, seen from a serial loop: block 0 is this call's alone.
  const int t = omp_get_thread_num();
  return blocks_ + static_cast<std::size_t>(t < slots_ ? t : 0) * stride_;
}

ScratchFor::ScratchFor(KernelScratch* given) : use_(given != nullptr && !omp_in_parallel() ? given : &own_) {}

}  // namespace cleave::kernels::cpu
