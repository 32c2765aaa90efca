// kernels/cuda/copy_2d_plan.hpp on the CPU: the CUDA copy_2d slot's choice between one block, one pitched copy and
// a copy per row. The shapes are the callers': ring attention's chunk copies (kPitched: a qkv row's pitch) and the
// Ulysses exchange, whose sequence-major copies reach a pitch above cudaDevAttrMaxPitch (2^31 - 1 bytes on current
// GPUs) at long context and must then go row by row (cudaMemcpy2DAsync refuses such a pitch; the CPU backend has
// no limit, so only a GPU would have failed).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/copy_2d_plan.hpp"

namespace cleave::testing::copy_2d_plan_test {
namespace {

namespace kc = kernels::cuda;
using kc::Copy2dMethod;

constexpr std::int64_t kMaxPitch = (std::int64_t{1} << 31) - 1;  // cudaDevAttrMaxPitch on sm_80 and sm_90

// Ulysses' copy of rank i's tokens into the whole sequence (ulysses.cpp: {b, tl * w, 0, tl * w, i * tl * w,
// cp * tl * w}), in bytes.
Copy2dMethod ulysses_gather(std::int64_t batch, std::int64_t seq, int cp, std::int64_t cols, std::int64_t elem) {
  const std::int64_t width = seq / cp * cols * elem;
  return kc::copy_2d_method(batch, width, width, seq * cols * elem, kMaxPitch);
}

TEST(CudaCopy2dPlan, SmallStridedCopiesAreOnePitchedCopy) {
  // Ring attention's chunk of q out of qkv: 2 samples x 512 tokens, 768 of 2,304 f32 columns.
  EXPECT_EQ(kc::copy_2d_method(512, 768 * 4, 2304 * 4, 768 * 4, kMaxPitch), Copy2dMethod::kPitched);
  EXPECT_EQ(ulysses_gather(8, 1024, 2, 3072, 4), Copy2dMethod::kPitched);
}

TEST(CudaCopy2dPlan, ContiguousRowsOrOneRowAreOneBlock) {
  EXPECT_EQ(kc::copy_2d_method(1000, 64, 64, 64, kMaxPitch), Copy2dMethod::kOneBlock);
  EXPECT_EQ(kc::copy_2d_method(1, 64, 128, 4096, kMaxPitch), Copy2dMethod::kOneBlock);
  // One sample: the Ulysses copy is one block whatever the sequence length (no pitch to limit).
  EXPECT_EQ(ulysses_gather(1, std::int64_t{1} << 20, 2, 3072, 4), Copy2dMethod::kOneBlock);
}

TEST(CudaCopy2dPlan, PitchAboveTheDeviceMaximumGoesRowByRow) {
  // 2 samples of 262,144 f32 tokens, 3,072 columns per rank's share at cp 2: a 3.2 GB destination pitch.
  EXPECT_GT(std::int64_t{262144} * 3072 * 4, kMaxPitch);
  EXPECT_EQ(ulysses_gather(2, 262144, 2, 3072, 4), Copy2dMethod::kRowByRow);
  // The same in bf16 is 1.6 GB: still one pitched copy.
  EXPECT_EQ(ulysses_gather(2, 262144, 2, 3072, 2), Copy2dMethod::kPitched);
  // The edges: a pitch of exactly the maximum is allowed, one byte more is not (either side).
  EXPECT_EQ(kc::copy_2d_method(2, 16, kMaxPitch, 16, kMaxPitch), Copy2dMethod::kPitched);
  EXPECT_EQ(kc::copy_2d_method(2, 16, kMaxPitch + 1, 16, kMaxPitch), Copy2dMethod::kRowByRow);
  EXPECT_EQ(kc::copy_2d_method(2, 16, 16, kMaxPitch + 1, kMaxPitch), Copy2dMethod::kRowByRow);
}

}  // namespace
}  // namespace cleave::testing::copy_2d_plan_test
