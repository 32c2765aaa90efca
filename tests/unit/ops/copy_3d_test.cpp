// ops::copy_3d on the CPU against a plain triple loop over the elements (bits in one dtype; float_to_bf16 /
// bf16_to_float of engine/core/dtype.hpp across f32 <-> bf16), at 1 and 2 threads, on ring attention's shapes
// (B 1 and 3, odd chunk lengths, a column block of a packed q | k | v row, and the inverse put) and one large enough
// to be shared out; the destination starts poisoned so an element written out of place, or one missed, shows. The
// ring's one call per chunk gives the bits of its former per-sample copy_2d loop (and, converting, of copy_2d then
// copy), so the ring's numerics are unchanged. Bad shapes are refused before any write.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::test::copy_3d_test {
namespace {

using cleave::kernels::test::random_floats;

// Random values with the awkward ones among them: a bf16 rounding tie (1 + 2^-8), its neighbour, signed zero,
// infinities, a NaN, an f32 subnormal and the largest finite f32 (rounds to bf16 infinity).
std::vector<float> awkward_floats(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v = random_floats(static_cast<std::size_t>(n), seed, 3.0f);
  const float special[] = {1.00390625f, 1.005859375f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                           1e-40f, std::numeric_limits<float>::max()};
  for (std::size_t i = 0; i < std::size(special) && i * 7 < v.size(); ++i) v[i * 7] = special[i];
  return v;
}

Tensor filled(const Shape& shape, DType dtype, std::uint64_t seed) {
  const std::vector<float> v = awkward_floats(shape.numel(), seed);
  if (dtype == DType::kF32) return f32(v, shape);
  Tensor t = empty(shape, DType::kBF16);
  auto* bits = static_cast<std::uint16_t*>(t.raw_data());
  for (std::size_t i = 0; i < v.size(); ++i) bits[i] = float_to_bf16(v[i]);
  return t;
}

// Element i of t as its bits widened to 32 (f32: the bits; bf16: the 16 bits).
std::uint32_t bits_at(const Tensor& t, std::int64_t i) {
  if (t.dtype() == DType::kBF16) return static_cast<const std::uint16_t*>(t.raw_data())[i];
  std::uint32_t b;
  std::memcpy(&b, static_cast<const float*>(t.raw_data()) + i, 4);
  return b;
}

// The bits element `i` of src becomes in dst's dtype.
std::uint32_t converted_bits(const Tensor& src, std::int64_t i, DType to) {
  const std::uint32_t b = bits_at(src, i);
  if (src.dtype() == to) return b;
  if (to == DType::kBF16) {
    float f;
    std::memcpy(&f, &b, 4);
    return float_to_bf16(f);
  }
  const float f = bf16_to_float(static_cast<std::uint16_t>(b));
  std::uint32_t out;
  std::memcpy(&out, &f, 4);
  return out;
}

// What copy_3d must leave in dst: dst's bits, the block's elements replaced by src's converted.
std::vector<std::uint32_t> reference(const Tensor& src, const Tensor& dst, const Copy3d& s) {
  std::vector<std::uint32_t> want(static_cast<std::size_t>(dst.numel()));
  for (std::int64_t i = 0; i < dst.numel(); ++i) want[static_cast<std::size_t>(i)] = bits_at(dst, i);
  for (std::int64_t b = 0; b < s.batches; ++b) {
    for (std::int64_t r = 0; r < s.rows; ++r) {
      for (std::int64_t c = 0; c < s.cols; ++c) {
        const std::int64_t from = s.src_offset + b * s.src_batch_stride + r * s.src_row_stride + c;
        const std::int64_t to = s.dst_offset + b * s.dst_batch_stride + r * s.dst_row_stride + c;
        want[static_cast<std::size_t>(to)] = converted_bits(src, from, dst.dtype());
      }
    }
  }
  return want;
}

void expect_bits(const Tensor& got, const std::vector<std::uint32_t>& want, const std::string& what) {
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const std::uint32_t g = bits_at(got, i), w = want[static_cast<std::size_t>(i)];
    if (g != w && ++wrong <= 3) ADD_FAILURE() << what << ": element " << i << " bits " << g << " want " << w;
  }
  EXPECT_EQ(wrong, 0) << what;
}

struct Case {
  std::string what;
  Shape src, dst;
  Copy3d shape;
};

// Ring attention's take of columns [col, col + cols) of tokens [tok, tok + n) of x [B, Tl, W] into [B, n, cols],
// and its put back.
Case take(std::int64_t b, std::int64_t tl, std::int64_t w, std::int64_t col, std::int64_t cols, std::int64_t tok,
          std::int64_t n) {
  return {"take B" + std::to_string(b) + " Tl" + std::to_string(tl) + " W" + std::to_string(w) + " cols " +
              std::to_string(col) + "+" + std::to_string(cols) + " tokens " + std::to_string(tok) + "+" +
              std::to_string(n),
          Shape{b, tl, w}, Shape{b, n, cols}, Copy3d{b, n, cols, tok * w + col, tl * w, w, 0, n * cols, cols}};
}
Case put(std::int64_t b, std::int64_t tl, std::int64_t w, std::int64_t col, std::int64_t cols, std::int64_t tok,
         std::int64_t n) {
  Case c = take(b, tl, w, col, cols, tok, n);
  const Copy3d& t = c.shape;
  return {"put" + c.what.substr(4), c.dst, c.src,
          Copy3d{b, n, cols, 0, n * cols, cols, t.src_offset, t.src_batch_stride, t.src_row_stride}};
}

std::vector<Case> cases() {
  return {
      take(1, 6, 24, 0, 8, 0, 3),    // q of chunk 0, B 1, c 3
      take(3, 6, 24, 8, 8, 3, 3),    // k of chunk 1, B 3
      take(3, 10, 21, 13, 4, 5, 5),  // v of chunk 1 (odd width, odd offset), c 5
      take(3, 14, 9, 0, 9, 7, 7),    // whole rows: each sample's block contiguous
      put(1, 6, 24, 0, 8, 3, 3),
      put(3, 10, 21, 13, 4, 0, 5),
      put(3, 14, 33, 3, 17, 7, 7),
      {"one row, batch stride 0 on the source", Shape{40}, Shape{3, 1, 11}, Copy3d{3, 1, 11, 5, 0, 11, 0, 11, 11}},
      {"shared out: 3 x 2,700 rows of 30", Shape{3, 2700, 40}, Shape{3, 2700, 30},
       Copy3d{3, 2700, 30, 7, 2700 * 40, 40, 0, 2700 * 30, 30}},
  };
}

const DType kPairs[][2] = {{DType::kF32, DType::kF32},
                           {DType::kBF16, DType::kBF16},
                           {DType::kBF16, DType::kF32},
                           {DType::kF32, DType::kBF16}};

using Copy3dTest = CpuThreadsTest;

TEST_P(Copy3dTest, MovesTheBlockAndNothingElseInEveryDtypePair) {
  std::uint64_t seed = 1;
  for (const Case& c : cases()) {
    for (const auto& pair : kPairs) {
      const Tensor src = filled(c.src, pair[0], ++seed);
      Tensor dst = filled(c.dst, pair[1], ++seed);
      const std::vector<std::uint32_t> want = reference(src, dst, c.shape);
      copy_3d(ctx_, src, dst, c.shape);
      expect_bits(dst, want,
                  c.what + " " + std::string(dtype_name(pair[0])) + " -> " + std::string(dtype_name(pair[1])));
    }
  }
}

// What ring attention did before (one copy_2d per sample; converting, a copy of the whole tensor before or after,
// elementwise either way: here before) against its copy_3d now, onto the same starting destination.
TEST_P(Copy3dTest, GivesThePerSampleCopy2dBitsConvertedAsCopyConverts) {
  std::uint64_t seed = 100;
  for (const Case& c : cases()) {
    const Copy3d& s = c.shape;
    for (const auto& pair : kPairs) {
      const Tensor src = filled(c.src, pair[0], ++seed);
      const Tensor start = filled(c.dst, pair[1], ++seed);
      const Tensor src_as_dst = cast(ctx_, src, pair[1]);  // copy's conversion (or a plain copy)
      Tensor before = cast(ctx_, start, pair[1]), now = cast(ctx_, start, pair[1]);
      for (std::int64_t b = 0; b < s.batches; ++b) {
        copy_2d(ctx_, src_as_dst, before,
                {s.rows, s.cols, s.src_offset + b * s.src_batch_stride, s.src_row_stride,
                 s.dst_offset + b * s.dst_batch_stride, s.dst_row_stride});
      }
      copy_3d(ctx_, src, now, s);
      std::vector<std::uint32_t> want(static_cast<std::size_t>(before.numel()));
      for (std::int64_t i = 0; i < before.numel(); ++i) want[static_cast<std::size_t>(i)] = bits_at(before, i);
      expect_bits(now, want,
                  c.what + " " + std::string(dtype_name(pair[0])) + " -> " + std::string(dtype_name(pair[1])));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, Copy3dTest, ::testing::Values(1, 2));

TEST(Copy3d, RefusesBadShapesBeforeWriting) {
  const Context ctx;
  const Tensor src = f32(random_floats(60, 3), {3, 4, 5});
  Tensor dst = f32(random_floats(60, 4), {3, 4, 5});
  const std::vector<float> kept = dst.to_floats();
  const auto refused = [&](const Copy3d& s, const std::string& why) {
    EXPECT_THROW(copy_3d(ctx, src, dst, s), Error) << why;
    EXPECT_EQ(dst.to_floats(), kept) << why;
  };
  refused({3, 4, 5, 1, 20, 5, 0, 20, 5}, "the source's last row runs past its end");
  refused({3, 4, 5, 0, 20, 5, 1, 20, 5}, "the destination's last row runs past its end");
  refused({3, 4, 5, 0, 20, 5, 0, 19, 5}, "batches overlapping in the destination");
  refused({3, 4, 5, 0, 20, 4, 0, 20, 5}, "a source row stride below the columns");
  refused({2, 2, 5, -1, 20, 5, 0, 20, 5}, "a negative offset");
  const Tensor ints = Tensor::empty({3, 4, 5}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  EXPECT_THROW(copy_3d(ctx, ints, dst, {1, 1, 1, 0, 0, 1, 0, 0, 1}), Error) << "i32 -> f32 is not a float cast";
  copy_3d(ctx, src, dst, {0, 4, 5, 0, 20, 5, 0, 20, 5});  // nothing to copy: allowed, nothing written
  copy_3d(ctx, src, dst, {3, 4, 0, 0, 20, 5, 0, 20, 5});
  EXPECT_EQ(dst.to_floats(), kept);
}

}  // namespace
}  // namespace cleave::ops::test::copy_3d_test
