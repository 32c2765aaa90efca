// How the CUDA backend's copy_2d slot (kernels/ops/cuda/cuda_backend.cpp) moves `rows` rows of `width` bytes
// between two pitched buffers, as a pure host function (no CUDA include) so a CPU test can check it
// (tests/unit/cuda/copy_2d_plan_test.cpp).
//
// Why: cudaMemcpy2DAsync "returns an error if dpitch or spitch is greater than the maximum allowed" (the
// device's cudaDevAttrMaxPitch, 2^31 - 1 bytes on current GPUs), a limit the CPU backend does not have. The
// Ulysses exchange (layers/context_parallel/ulysses.cpp) copies each sample's sequence-major block with a pitch
// of the whole sequence's row of its head block (T x columns x element bytes): 3.2 GB for 262,144 f32 tokens of
// 3,072 columns. Such a copy goes row by row; a copy whose rows are contiguous on both sides (or a single row) is
// one plain block, which has no pitch to limit.
//
// Invariant: every method moves exactly the same bytes to the same places (the rows do not overlap, the seam
// checked the shape); only the number of CUDA calls differs.
#pragma once

#include <cstdint>

namespace cleave::kernels::cuda {

enum class Copy2dMethod {
  kOneBlock,  // one cudaMemcpyAsync of rows x width bytes (one row, or rows contiguous on both sides)
  kPitched,   // one cudaMemcpy2DAsync: both pitches within the device's maximum
  kRowByRow,  // one cudaMemcpyAsync per row: a pitch above the maximum (rows <= memory / 2 GiB then)
};

// rows >= 1, width >= 1, pitches >= width (bytes; the seam's copy_2d checked the shape), max_pitch the device's
// cudaDevAttrMaxPitch.
constexpr Copy2dMethod copy_2d_method(std::int64_t rows, std::int64_t width, std::int64_t src_pitch,
                                      std::int64_t dst_pitch, std::int64_t max_pitch) {
  if (rows == 1 || (src_pitch == width && dst_pitch == width)) return Copy2dMethod::kOneBlock;
  if (src_pitch <= max_pitch && dst_pitch <= max_pitch) return Copy2dMethod::kPitched;
  return Copy2dMethod::kRowByRow;
}

}  // namespace cleave::kernels::cuda
