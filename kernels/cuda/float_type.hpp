// The element type of a floating tensor a kernel reads or writes: f32, or bf16 storage (read widened to f32,
// written rounded to nearest even; the arithmetic in between is f32, the CPU backend's numerics contract).
// Host and device code; kernels that take `const void*` tensors take one of these per tensor.
#pragma once

namespace cleave::kernels::cuda {

enum class FloatType { kF32, kBF16 };

}  // namespace cleave::kernels::cuda
