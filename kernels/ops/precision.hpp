// Precision (device.precision): the op seam's numeric mode, with its name table (engine/core/enum_names.hpp).
// Header-only so the config reader can name it without linking the ops library. Also AttentionSums, the order the CPU's
// bf16 attention sums in (verify's twin only).
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

// Where the CPU backend runs an all-bf16 attention problem (forward and backward): kKernel, the bf16 kernel (the bf16
// dot path's sums; kernels/cpu/flash_attention.hpp); kReordered, the f32 kernel on widened operands with P and dS
// rounded to bf16 as the bf16 kernel rounds them (FlashAttentionShape::round_probabilities), as ring attention's blocks
// run, with each key block halved (FlashAttentionShape::key_block): the same values before the same bf16 roundings,
// every attention sum (Q K^T and dO V^T over the head dimension; P V, P^T dO, dS K, dS^T Q) in the f32 block GEMM's
// order, and each row's online softmax merging twice as many partial blocks (its f32 rescaling at each new maximum),
// as ring attention merges its ranks' blocks; kReorderedQuarters, the same with each key block a quarter of the
// kernel's (four times the merges: another order again, so two twins differ from each other as well as from the
// reference). Not a config key: `cleave verify`'s twin references set kReordered and kReorderedQuarters
// (engine/train/verify_floor.hpp); every run otherwise takes kKernel. No effect on CUDA or in fp32.
enum class AttentionSums { kKernel, kReordered, kReorderedQuarters };

}  // namespace cleave::ops
