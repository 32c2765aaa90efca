// The execution context every op runs in: which device, whose memory, which stream, how GEMMs are sliced, which
// library runs them on the CPU and which precision the working tensors use. One per run (a trainer owns its
// own), passed explicitly: nothing here is process state, so two runs in one process (as `cleave verify`
// builds) cannot disturb each other.
//
// Invariants: `allocator` serves `device`; every tensor an op touches lives on `device`; scratch an op needs
// comes from `allocator` (kWorkspace, returned before the op does: reused, so a steady-state step makes no system
// allocation) or, for buffers a backend keeps between calls (CPU row/chunk buffers, scratchpads), `resources`.
#pragma once

#include <string_view>

#include "engine/core/allocator.hpp"
#include "engine/core/device.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/stream.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/host_waits.hpp"
#include "kernels/ops/precision.hpp"

namespace cleave::ops {

// kDeterministic: results do not depend on the thread count or launch configuration (train.deterministic).
enum class GemmMode { kFast, kDeterministic };

// Precision (fp32 | bf16 mixed precision): kernels/ops/precision.hpp.

struct Backend;  // backend.hpp

// Per-device handles a backend keeps between ops (the CUDA backend's cuBLASLt context and status words; the CPU
// backend's oneDNN primitives and scratchpads). Opaque here; created by the backend (make_device_resources in
// ops.hpp), owned by the run.
class DeviceResources {
 public:
  virtual ~DeviceResources() = default;
};

struct Context {
  Device device = Device::cpu();
  Allocator* allocator = &cpu_allocator();
  const Stream* stream = &cpu_stream();
  GemmMode gemm_mode = GemmMode::kFast;
  Precision precision = Precision::kFp32;
  CpuBlas cpu_blas = CpuBlas::kAuto;  // the cpu backend's GEMM library (device.blas; cpu_blas.hpp resolves auto)
  // Where the cpu backend runs all-bf16 attention (precision.hpp; kReordered in verify's twin reference only).
  AttentionSums attention_sums = AttentionSums::kKernel;
  // The run's backend state (make_device_resources). Required on a GPU; on the CPU a context without it (tests,
  // tools) computes the same bits, its oneDNN GEMMs remaking their primitives per call (cpu/cpu_resources.hpp).
  DeviceResources* resources = nullptr;
  // The slot table the ops call; null (always, outside tests) = the device's registered backend. Tests put a
  // wrapped table here (tests/unit/ops/cuda_coverage_test.cpp records which slots a training step calls).
  const Backend* backend = nullptr;
  // The run's host-wait counter (host_waits.hpp): every "(host value)" op of ops.hpp notes its wait here; null
  // (a context outside a run) counts nothing. Owned by the run, which outlives its contexts.
  HostWaits* host_waits = nullptr;

  // dtype of activations and of the weights' working copies under `precision`.
  DType compute_dtype() const { return precision == Precision::kBf16 ? DType::kBF16 : DType::kF32; }
};

}  // namespace cleave::ops
