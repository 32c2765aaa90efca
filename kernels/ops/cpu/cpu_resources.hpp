// The CPU backend's per-run state, Context::resources on the CPU: oneDNN's matmul primitives and scratchpads
// (kernels/cpu/onednn_matmuls.hpp) and the kernels' scratch (kernels/cpu/kernel_scratch.hpp: the bf16 chunk
// buffers of cpu_chunked_view.hpp, RoPE's cos/sin table and bf16 row buffers, cross-entropy's per-row losses and
// bf16 row buffers). Made by make_device_resources(Device::cpu()) and owned by the run (RankSetup,
// `cleave profile --gemm`), as the CUDA backend's CudaResources are: nothing of the CPU backend is process state.
//
// Invariant: a run's contexts all point at its one CpuResources, so a GEMM shape's primitive is made once per run
// and a steady-state step allocates no scratchpad and grows no kernel scratch. A context without resources (one
// made outside a run: tests, tools) still computes the same bits: its oneDNN GEMMs make their primitives for the
// call (cpu_gemm.cpp), its kernels their scratch (ScratchFor).
//
// Adding state: a member here, reached by the slots through cpu_resources(ctx); never a static in a slot.
#pragma once

#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"
#include "kernels/ops/context.hpp"

namespace cleave::ops::cpu_detail {

class CpuResources final : public DeviceResources {
 public:
  kernels::cpu::OneDnnMatmuls& onednn() { return onednn_; }
  kernels::cpu::KernelScratch& scratch() { return scratch_; }

 private:
  kernels::cpu::OneDnnMatmuls onednn_;
  kernels::cpu::KernelScratch scratch_;
};

// ctx's CPU resources; null when the context carries none. Throws when it carries another device's.
CpuResources* cpu_resources(const Context& ctx);

// The scratch ctx's kernels borrow: its run's, or null (the kernel makes one for the call).
inline kernels::cpu::KernelScratch* cpu_scratch(const Context& ctx) {
  CpuResources* r = cpu_resources(ctx);
  return r != nullptr ? &r->scratch() : nullptr;
}

}  // namespace cleave::ops::cpu_detail
