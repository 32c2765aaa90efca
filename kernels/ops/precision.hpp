// Precision (device.precision): the op seam's numeric mode, with its name table (engine/core/enum_names.hpp).
// Header-only so the config reader can name it without linking the ops library.
//
// fp32: every tensor f32. bf16 (mixed precision): activations, working copies of weights, stage-boundary
// tensors and gradient communication in bf16; master weights, optimizer state, loss and softmax statistics
// in f32; every GEMM and reduction accumulates in f32.
#pragma once

#include <array>

#include "engine/core/enum_names.hpp"

namespace cleave::ops {

enum class Precision { kFp32, kBf16 };
constexpr std::array<EnumName<Precision>, 2> enum_names(Precision) {
  return {{{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}}};
}

}  // namespace cleave::ops
