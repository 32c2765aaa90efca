// GradientBucketer under mpiexec: bucket layout (order, cap, alignment, views), reduced values against an
// ordered-sum reference (bit-exact in deterministic mode), overlap (buckets launched during backward), two
// steps in a row, ZeRO-1 reduce-scatter shards, and misuse errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/comm/gradient_bucketer.hpp"
#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"
#include "tests/reference/sum_tree_reference.hpp"

namespace cleave::testing::comm_bucketer_test {
namespace {

using comm::BucketerOptions;
using comm::BucketReduction;
using comm::GradientBucketer;
using comm::GradientSpec;

std::vector<GradientSpec> specs() {
  return {{"head.weight", {37, 5}, DType::kF32},     {"head.bias", {1}, DType::kF32},
          {"blocks.1.fc2", {1021}, DType::kF32},     {"blocks.1.fc1", {64, 33}, DType::kF32},
          {"blocks.1.ln", {7}, DType::kF32},         {"blocks.0.big", {3001, 7}, DType::kF32},  // > cap: alone
          {"blocks.0.norm", {13, 13}, DType::kBF16}, {"blocks.0.gate", {50}, DType::kBF16},
          {"embed.pos", {2}, DType::kF32},           {"embed.tok", {401, 3}, DType::kF32}};
}
constexpr double kBucketMib = 16.0 / 1024;  // 16 KiB: several buckets out of ~130 KiB of gradients

BucketerOptions options(double bucket_mib, float scale, BucketReduction reduction) {
  BucketerOptions o;
  o.bucket_mib = bucket_mib;
  o.scale = scale;
  o.reduction = reduction;
  return o;
}

// Rank r's gradient value for element i of gradient g in step s, quantized to the gradient's dtype.
float grad_value(int rank, int g, std::int64_t i, int step, DType dtype) {
  // splitmix64 of (rank, g, i, step): cheap enough to evaluate per element for every rank.
  std::uint64_t z = static_cast<std::uint64_t>(rank) * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(g) * 0xbf58476d1ce4e5b9ull +
                    static_cast<std::uint64_t>(i) * 0x94d049bb133111ebull + static_cast<std::uint64_t>(step) * 0x2545f4914f6cdd1dull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float unit = static_cast<float>(z >> 40) * 0x1p-24f * 2.0f - 1.0f;  // [-1, 1)
  const float v = (unit == 0.0f ? 0.5f : unit) * (1.0f + static_cast<float>(i % 5) * 10.0f);
  return dtype == DType::kBF16 ? bf16_to_float(float_to_bf16(v)) : v;
}


float expected_value(int n, int g, std::int64_t i, int step, DType dtype, float scale) {
  float acc = canonical_sum_reference(0, static_cast<std::size_t>(n), [&](std::size_t q) {
    return grad_value(static_cast<int>(q), g, i, step, dtype);
  });
  if (dtype == DType::kBF16) acc = bf16_to_float(float_to_bf16(acc));
  acc *= scale;
  return dtype == DType::kBF16 ? bf16_to_float(float_to_bf16(acc)) : acc;
}

void fill_grads(GradientBucketer& b, int rank, int step) {
  for (int g = 0; g < b.num_grads(); ++g) {
    Tensor t = b.grad(g);
    for (std::int64_t i = 0; i < t.numel(); ++i) set_value(t, i, grad_value(rank, g, i, step, t.dtype()));
  }
}

TEST(GradientBucketer, LayoutFollowsReadyOrderCapDtypeAndAlignment) {
  auto world = make_world();
  GradientBucketer b(specs(), *world, options(kBucketMib, 1.0f, BucketReduction::kAllReduce), cpu_allocator());
  ASSERT_GE(b.num_buckets(), 4);
  int expected_first = 0;
  for (int k = 0; k < b.num_buckets(); ++k) {
    const auto& bk = b.bucket(k);
    EXPECT_EQ(bk.first_grad, expected_first);
    expected_first = bk.end_grad;
    const auto bytes = bk.numel * static_cast<std::int64_t>(dtype_size(bk.dtype));
    if (bk.end_grad - bk.first_grad > 1) {
      EXPECT_LE(bytes, 16 * 1024 + 64) << "bucket " << k;
    }
    EXPECT_EQ(b.bucket_buffer(k).category(), MemoryCategory::kGradients);
  }
  EXPECT_EQ(expected_first, b.num_grads());
  EXPECT_EQ(b.bucket(b.slot(5).bucket).end_grad - b.bucket(b.slot(5).bucket).first_grad, 1) << "big gradient alone";
  EXPECT_NE(b.slot(5).bucket, b.slot(4).bucket);
  EXPECT_NE(b.slot(6).bucket, b.slot(5).bucket);  // dtype change
  EXPECT_NE(b.slot(8).bucket, b.slot(7).bucket);  // dtype change back
  for (int g = 0; g < b.num_grads(); ++g) {
    Tensor t = b.grad(g);
    EXPECT_EQ(t.shape(), specs()[static_cast<std::size_t>(g)].shape);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64, 0u) << "gradient " << g;
    // A view: writing through it shows in the bucket buffer.
    set_value(t, 0, 42.0);
    EXPECT_EQ(get_value(b.bucket_buffer(b.slot(g).bucket), b.slot(g).offset), 42.0);
  }
}

class BucketerModes : public ::testing::TestWithParam<bool> {};  // deterministic?

TEST_P(BucketerModes, AllReduceTwoStepsWithOverlap) {
  const bool det = GetParam();
  auto world = make_world(det);
  const int n = world->size();
  const int r = world->rank();
  const float scale = 1.0f / static_cast<float>(n);
  GradientBucketer b(specs(), *world, options(kBucketMib, scale, BucketReduction::kAllReduce), cpu_allocator());
  for (int step = 0; step < 2; ++step) {
    b.zero_grads();
    fill_grads(b, r, step);
    // Odd ranks mark in a different order inside the sequence; launches still happen in bucket order.
    std::vector<int> order(static_cast<std::size_t>(b.num_grads()));
    for (int g = 0; g < b.num_grads(); ++g) order[static_cast<std::size_t>(g)] = g;
    if (r % 2 == 1) std::swap(order[1], order[3]);
    for (int g : order) {
      b.mark_ready(g);
      b.poll();
    }
    EXPECT_EQ(b.finish(), b.num_buckets()) << "every bucket should have started before finish()";
    for (int g = 0; g < b.num_grads(); ++g) {
      Tensor t = b.grad(g);
      std::int64_t wrong = 0;
      std::int64_t far = 0;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        const float expected = expected_value(n, g, i, step, t.dtype(), scale);
        const float got = static_cast<float>(get_value(t, i));
        wrong += std::memcmp(&got, &expected, sizeof got) != 0;
        const double tol = t.dtype() == DType::kBF16 ? 0x1p-7 : 1e-5;
        far += std::abs(got - expected) > tol * (1.0 + std::abs(expected));
      }
      if (det) {
        EXPECT_EQ(wrong, 0) << "step " << step << " gradient " << g << " not bit-identical to the ordered sum";
      } else {
        EXPECT_EQ(far, 0) << "step " << step << " gradient " << g;
      }
    }
  }
}

TEST_P(BucketerModes, ReduceScatterShardsForZero1) {
  const bool det = GetParam();
  auto world = make_world(det);
  const int n = world->size();
  const int r = world->rank();
  const float scale = 0.5f;
  GradientBucketer b(specs(), *world, options(kBucketMib, scale, BucketReduction::kReduceScatter), cpu_allocator());
  b.zero_grads();
  fill_grads(b, r, 3);
  EXPECT_EQ(b.finish(), 0) << "nothing marked: everything launched by finish()";
  std::int64_t checked = 0;
  std::int64_t far = 0;
  for (int k = 0; k < b.num_buckets(); ++k) {
    EXPECT_EQ(b.bucket(k).numel % n, 0);
    const std::int64_t begin = b.shard_begin(k);
    const std::int64_t end = begin + b.shard(k).numel();
    for (int g = b.bucket(k).first_grad; g < b.bucket(k).end_grad; ++g) {
      const auto& s = b.slot(g);
      for (std::int64_t e = std::max(begin, s.offset); e < std::min(end, s.offset + s.numel); ++e) {
        const std::int64_t i = e - s.offset;
        const DType dtype = b.bucket(k).dtype;
        const float expected = expected_value(n, g, i, 3, dtype, scale);
        const double got = get_value(b.shard(k), e - begin);
        far += std::abs(got - expected) > (dtype == DType::kBF16 ? 0x1p-7 : 1e-5) * (1.0 + std::abs(expected));
        ++checked;
      }
    }
  }
  EXPECT_EQ(far, 0);
  std::int64_t total = 0;
  for (const auto& spec : specs()) total += spec.shape.numel();
  std::int64_t all_checked = 0;
  Tensor count = Tensor::empty({1}, DType::kI64, MemoryCategory::kActivations, cpu_allocator());
  set_value(count, 0, static_cast<double>(checked));
  world->all_reduce(count, comm::ReduceOp::kSum)->wait();
  all_checked = static_cast<std::int64_t>(get_value(count, 0));
  EXPECT_EQ(all_checked, total) << "the shards together must cover every gradient element exactly once";
}

INSTANTIATE_TEST_SUITE_P(Modes, BucketerModes, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("deterministic") : "plain"; });

TEST(GradientBucketer, MisuseIsRefused) {
  auto world = make_world();
  GradientBucketer b(specs(), *world, options(kBucketMib, 1.0f, BucketReduction::kAllReduce), cpu_allocator());
  b.zero_grads();
  b.mark_ready(0);
  EXPECT_THROW(b.mark_ready(0), Error);
  EXPECT_THROW(b.mark_ready(b.num_grads()), Error);
  for (int g = 1; g < b.num_grads(); ++g) b.mark_ready(g);
  EXPECT_THROW(b.zero_grads(), Error);  // buckets in flight
  b.finish();
  EXPECT_THROW(b.shard(0), Error);  // all-reduce mode has no shards
  EXPECT_THROW(GradientBucketer({{"w", {3}, DType::kI32}}, *world, {}, cpu_allocator()), Error);
  EXPECT_THROW(GradientBucketer(specs(), *world, options(0.0, 1.0f, BucketReduction::kAllReduce), cpu_allocator()),
               Error);
}

}  // namespace
}  // namespace cleave::testing::comm_bucketer_test
