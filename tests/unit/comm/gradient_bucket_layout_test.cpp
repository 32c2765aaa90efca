// The gradient buckets' layout (engine/comm/gradient_bucket_layout.hpp) as a pure function: where each bucket is cut
// (the byte cap, a dtype change, a gradient larger than the cap, units and packed units with their groups), the
// 64-byte alignment of every gradient, the padding of a bucket to the shard multiple, and the refusal of a gradient
// that is not floating. Every expectation is worked by hand from the sizes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/comm/gradient_bucket_layout.hpp"
#include "engine/core/error.hpp"

namespace cleave::comm::gradient_bucket_layout_test {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

GradientSpec f32(const std::string& name, std::int64_t numel, int unit = -1, int group = -1) {
  return GradientSpec{name, Shape{numel}, DType::kF32, unit, group};
}

TEST(GradientBucketLayout, CutsAtTheByteCapAndAlignsEveryGradient) {
  // Cap 128 f32 (512 bytes, exact in binary as MiB). 10 -> offset 0; 30 -> offset 16 (10 rounded up to 16 floats =
  // 64 bytes), end 46; 90 would end at 48 + 90 = 138 > 128: a new bucket. A gradient larger than the cap (150)
  // gets its own, and the next one (5) another: 160 + 5 > 128.
  const double cap_mib = 512.0 / kMiB;
  const BucketLayout layout =
      lay_out_buckets({f32("a", 10), f32("b", 30), f32("c", 90), f32("big", 150), f32("d", 5)}, cap_mib, false, 1);
  ASSERT_EQ(layout.buckets.size(), 4u);
  ASSERT_EQ(layout.slots.size(), 5u);
  EXPECT_EQ(layout.slots[0].offset, 0);
  EXPECT_EQ(layout.slots[1].offset, 16);
  EXPECT_EQ(layout.slots[1].bucket, 0);
  EXPECT_EQ(layout.slots[2].bucket, 1);
  EXPECT_EQ(layout.slots[2].offset, 0);
  EXPECT_EQ(layout.slots[3].bucket, 2);
  EXPECT_EQ(layout.slots[4].bucket, 3);
  EXPECT_EQ(layout.buckets[0].first_grad, 0);
  EXPECT_EQ(layout.buckets[0].end_grad, 2);
  // numel padded to 16 floats: 46 -> 48, 90 -> 96, 150 -> 160, 5 -> 16.
  EXPECT_EQ(layout.buckets[0].numel, 48);
  EXPECT_EQ(layout.buckets[1].numel, 96);
  EXPECT_EQ(layout.buckets[2].numel, 160);
  EXPECT_EQ(layout.buckets[3].numel, 16);
}

TEST(GradientBucketLayout, ADtypeChangeOpensABucketAndAlignmentFollowsTheElementSize) {
  // bf16 aligns to 32 elements (64 bytes): 3 bf16 then 3 bf16 -> offsets 0 and 32, padded numel 64.
  const std::vector<GradientSpec> grads = {f32("a", 3), {"b", Shape{3}, DType::kBF16}, {"c", Shape{3}, DType::kBF16}};
  const BucketLayout layout = lay_out_buckets(grads, 25.0, false, 1);
  ASSERT_EQ(layout.buckets.size(), 2u);
  EXPECT_EQ(layout.buckets[0].dtype, DType::kF32);
  EXPECT_EQ(layout.buckets[1].dtype, DType::kBF16);
  EXPECT_EQ(layout.slots[2].offset, 32);
  EXPECT_EQ(layout.buckets[1].numel, 64);
}

TEST(GradientBucketLayout, BucketsArePaddedToTheShardMultiple) {
  // 20 f32 -> 32 after the 64-byte alignment -> 33, the next multiple of the shard multiple 3.
  const BucketLayout layout = lay_out_buckets({f32("a", 20)}, 25.0, false, 3);
  ASSERT_EQ(layout.buckets.size(), 1u);
  EXPECT_EQ(layout.buckets[0].numel, 33);
  EXPECT_EQ(layout.buckets[0].numel % 3, 0);
}

TEST(GradientBucketLayout, UnitsCutAtEveryChangeWhateverTheCap) {
  // Units 0, 0, 1, 2: three buckets even under a cap that would hold everything.
  const BucketLayout layout =
      lay_out_buckets({f32("a", 4, 0), f32("b", 4, 0), f32("c", 4, 1), f32("d", 4, 2)}, 25.0, false, 1);
  ASSERT_EQ(layout.buckets.size(), 3u);
  EXPECT_EQ(layout.buckets[0].end_grad, 2);
  EXPECT_EQ(layout.slots[2].bucket, 1);
  EXPECT_EQ(layout.slots[3].bucket, 2);
}

TEST(GradientBucketLayout, PackedUnitsFillUpToTheCapAndNeverMixGroups) {
  // Cap 64 f32 (256 bytes, exact as MiB); each unit 16 floats. Units 0, 1, 2 of group 0 -> 16 + 16 + 16 = 48 <= 64: one bucket;
  // unit 3 of group 0 would end at 64: still fits; unit 4 (group 0) would end at 80 > 64: a new bucket; unit 5 is
  // group 1: a new bucket although it fits.
  const double cap_mib = 256.0 / kMiB;
  std::vector<GradientSpec> grads;
  for (int u = 0; u < 5; ++u) grads.push_back(f32(fmt::format("u{}", u), 16, u, 0));
  grads.push_back(f32("g1", 4, 5, 1));
  const BucketLayout layout = lay_out_buckets(grads, cap_mib, true, 1);
  ASSERT_EQ(layout.buckets.size(), 3u);
  EXPECT_EQ(layout.buckets[0].first_grad, 0);
  EXPECT_EQ(layout.buckets[0].end_grad, 4);
  EXPECT_EQ(layout.buckets[1].first_grad, 4);
  EXPECT_EQ(layout.buckets[1].end_grad, 5);
  EXPECT_EQ(layout.buckets[2].first_grad, 5);
}

TEST(GradientBucketLayout, RefusesAGradientThatIsNotFloating) {
  try {
    lay_out_buckets({f32("a", 4), {"steps", Shape{1}, DType::kI32}}, 25.0, false, 1);
    FAIL() << "an i32 gradient was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient 1 ('steps') is i32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::comm::gradient_bucket_layout_test
