// The CPU backend's per-run state, Context::resources on the CPU: oneDNN's matmul primitives and scratchpads
// (kernels/cpu/onednn_matmuls.hpp). Made by make_device_resources(Device::cpu()) and owned by the run (RankSetup,
// `cleave profile --gemm`), as the CUDA backend's CudaResources are: nothing of the CPU backend is process state.
//
// Invariant: a run's contexts all point at its one CpuResources, so a GEMM shape's primitive is made once per run
// and a steady-state step allocates no scratchpad. A context without resources (one made outside a run: tests,
// tools) still computes the same bits: its oneDNN GEMMs make their primitives for the call (cpu_gemm.cpp).
//
// Adding state: a member here, reached by the slots through cpu_resources(ctx); never a static in a slot.
#pragma once

#include "kernels/cpu/onednn_matmuls.hpp"
#include "kernels/ops/context.hpp"

namespace cleave::ops::cpu_detail {

class CpuResources final : public DeviceResources {
 public:
  kernels::cpu::OneDnnMatmuls& onednn() { return onednn_; }

 private:
  kernels::cpu::OneDnnMatmuls onednn_;
};

// ctx's CPU resources; null when the context carries none. Throws when it carries another device's.
CpuResources* cpu_resources(const Context& ctx);

}  // namespace cleave::ops::cpu_detail
