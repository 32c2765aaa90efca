// Host element loops of the comm backends: the canonical reduction order (sum_tree.hpp) and NaN/zero
// rules, 16-bit conversions, scaling; and the communicator helpers that classify tensor aliasing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/host_reduce.hpp"
#include "tests/reference/sum_tree_reference.hpp"

namespace cleave::comm::host_reduce_test {
namespace {

TEST(HostReduce, OrderedSumCombinesSlotsInOrder) {
  // 1e8 + 1 - 1e8 = 0 in f32 (1 is absorbed), while 1e8 - 1e8 + 1 = 1: order shows in the result.
  std::vector<float> a{1e8f, 1e8f}, b{1.0f, -1e8f}, c{-1e8f, 1.0f};
  const void* slots[] = {a.data(), b.data(), c.data()};
  std::vector<float> out(2);
  ordered_reduce(DType::kF32, ReduceOp::kSum, slots, out.data(), 2);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 1.0f);
}

TEST(HostReduce, FourSlotsSumAsTwoPairs) {
  // Canonical order for 4: (a + b) + (c + d). With 1e8, 1, -1e8, 1: (1e8) + (-1e8) = 0, while the
  // left-to-right sum gives ((1e8 + 1) - 1e8) + 1 = 1.
  std::vector<float> a{1e8f}, b{1.0f}, c{-1e8f}, d{1.0f};
  const void* slots[] = {a.data(), b.data(), c.data(), d.data()};
  float out = -1;
  ordered_reduce(DType::kF32, ReduceOp::kSum, slots, &out, 1);
  EXPECT_EQ(out, 0.0f);
}


TEST(HostReduce, OrderedSumMatchesTheCanonicalTreeForEverySlotCountAndAliasing) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  const std::int64_t count = 2500;  // more than one tile
  for (std::size_t n : {1u, 2u, 3u, 5u, 6u, 7u, 8u, 12u, 13u}) {
    std::vector<std::vector<float>> in(n, std::vector<float>(count));
    for (auto& v : in) for (auto& x : v) x = dist(gen) * std::pow(10.0f, static_cast<float>(gen() % 7) - 3.0f);
    std::vector<const void*> slots;
    for (auto& v : in) slots.push_back(v.data());
    std::vector<float> expected(count), column(n);
    std::int64_t differs_from_left_to_right = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      for (std::size_t s = 0; s < n; ++s) column[s] = in[s][i];
      expected[i] = testing::canonical_sum_reference(column, 0, n);
      float plain = column[0];
      for (std::size_t s = 1; s < n; ++s) plain += column[s];
      differs_from_left_to_right += plain != expected[i];
    }
    if (n >= 5) {
      EXPECT_GT(differs_from_left_to_right, 0) << n << " slots: inputs too tame to show the order";
    }
    ordered_reduce(DType::kF32, ReduceOp::kSum, slots, in[n / 2].data(), count);  // out aliases a slot
    EXPECT_EQ(std::memcmp(in[n / 2].data(), expected.data(), count * sizeof(float)), 0) << n << " slots";
  }
}

TEST(HostReduce, AlignedBlockSumsReduceToTheWholeSum) {
  // n = m * 2^j terms: summing each aligned block of 2^j canonically, then the m block sums canonically,
  // gives the canonical sum of all n (what lets dp ranks match one rank).
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t block : {1u, 2u, 4u, 8u}) {
    for (std::size_t m : {1u, 2u, 3u, 5u, 6u}) {
      std::vector<float> terms(block * m);
      for (auto& x : terms) x = dist(gen) * std::pow(10.0f, static_cast<float>(gen() % 9) - 4.0f);
      std::vector<float> sums(m);
      for (std::size_t b = 0; b < m; ++b) sums[b] = testing::canonical_sum_reference(terms, b * block, (b + 1) * block);
      std::vector<const void*> slots;
      for (auto& x : sums) slots.push_back(&x);
      float out = 0;
      ordered_reduce(DType::kF32, ReduceOp::kSum, slots, &out, 1);
      const float whole = testing::canonical_sum_reference(terms, 0, terms.size());
      EXPECT_EQ(std::memcmp(&out, &whole, sizeof out), 0) << m << " blocks of " << block;
    }
  }
}

TEST(HostReduce, Bf16AccumulatesInF32AndRoundsOnce) {
  // 256 + 1 + 1 in bf16 steps would stay 256 (1 is below half an ulp); in f32 it is 258, exact in bf16.
  std::vector<std::uint16_t> a{float_to_bf16(256.0f)}, b{float_to_bf16(1.0f)}, c{float_to_bf16(1.0f)};
  const void* slots[] = {a.data(), b.data(), c.data()};
  std::uint16_t out = 0;
  ordered_reduce(DType::kBF16, ReduceOp::kSum, slots, &out, 1);
  EXPECT_EQ(bf16_to_float(out), 258.0f);
}

TEST(HostReduce, MaxPropagatesNaNAndKeepsTheFirstOfEqualZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a{1.0f, -0.0f, nan}, b{nan, 0.0f, 5.0f};
  const void* slots[] = {a.data(), b.data()};
  std::vector<float> out(3);
  ordered_reduce(DType::kF32, ReduceOp::kMax, slots, out.data(), 3);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::signbit(out[1]));
  EXPECT_TRUE(std::isnan(out[2]));
}

TEST(HostReduce, IntegerSumWrapsAndMaxIsExact) {
  std::vector<std::int32_t> a{2147483647, -5}, b{1, 7};
  const void* slots[] = {a.data(), b.data()};
  std::vector<std::int32_t> out(2);
  ordered_reduce(DType::kI32, ReduceOp::kSum, slots, out.data(), 2);
  EXPECT_EQ(out[0], -2147483647 - 1);
  EXPECT_EQ(out[1], 2);
  std::vector<std::uint16_t> ua{65535, 3}, ub{1, 9};
  const void* uslots[] = {ua.data(), ub.data()};
  std::vector<std::uint16_t> uout(2);
  ordered_reduce(DType::kU16, ReduceOp::kMax, uslots, uout.data(), 2);
  EXPECT_EQ(uout[0], 65535);
  EXPECT_EQ(uout[1], 9);
}

TEST(HostReduce, F16ConversionRoundsToNearestEven) {
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f)), 1.0f);
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_float(float_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(70000.0f))));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even gives 1.
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  std::vector<float> src{0.1f, -3.75f, 2e-3f};  // normal f16 values (subnormals below 6.1e-5)
  std::vector<std::uint16_t> half(3);
  std::vector<float> back(3);
  narrow_from_f32(src.data(), DType::kF16, half.data(), 3);
  widen_to_f32(half.data(), DType::kF16, back.data(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(back[i], src[i], std::abs(src[i]) * 0x1p-10f) << i;
}

TEST(HostReduce, ScaleInPlace) {
  std::vector<float> f{2.0f, -6.0f};
  scale_in_place(f.data(), DType::kF32, 0.25f, 2);
  EXPECT_EQ(f, (std::vector<float>{0.5f, -1.5f}));
  std::vector<std::uint16_t> h{float_to_bf16(3.0f)};
  scale_in_place(h.data(), DType::kBF16, 0.5f, 1);
  EXPECT_EQ(bf16_to_float(h[0]), 1.5f);
  std::vector<std::int32_t> i{4};
  EXPECT_THROW(scale_in_place(i.data(), DType::kI32, 0.5f, 1), Error);
}

TEST(CommHelpers, AliasingClassification) {
  Tensor whole = Tensor::empty({12}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor other = Tensor::empty({3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  EXPECT_TRUE(is_block_of(whole.slice(6, 9), whole, 2, 4));
  EXPECT_FALSE(is_block_of(whole.slice(6, 9), whole, 1, 4));
  EXPECT_FALSE(is_block_of(whole.slice(5, 8), whole, 2, 4));
  EXPECT_FALSE(is_block_of(other, whole, 0, 4));
  EXPECT_TRUE(tensors_overlap(whole.slice(0, 4), whole.slice(3, 6)));
  EXPECT_FALSE(tensors_overlap(whole.slice(0, 3), whole.slice(3, 6)));
  EXPECT_FALSE(tensors_overlap(whole, other));
  EXPECT_EQ(format_ranks({0, 1, 2, 3, 5, 7, 8}), "[0..3,5,7,8]");
  EXPECT_EQ(format_ranks({4}), "[4]");
}

}  // namespace
}  // namespace cleave::comm::host_reduce_test
