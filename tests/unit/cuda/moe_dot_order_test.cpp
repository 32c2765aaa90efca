// kernels/cuda/moe_dot_order.hpp on the CPU: the CUDA routing weights' gradient (moe_combine_weight_grad_kernel,
// kernels/cuda/moe.cu) adds each output's products in MoeDotOrder's order, chunk by 32-column chunk as its warp
// tiles hold them. Emulated here chunk for chunk, it must give the CPU twin's bits (kernels/cpu/moe.cpp, whose
// dot sums in kMoeDotLanes partials) through MoeKernelDotOrder, the order the kernel is instantiated with, on widths
// below one vector, with every tail length, one chunk, chunks with a partial last one; MoeDotOrder<4> and <8> must be
// that many lanes' order. Both sides take kMoeDotLanes (kernels/moe_dot_lanes.hpp), tied at compile time below. The
// plain column-order sum the kernel used before is not the CPU's bits (checked, so this test would have caught it).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/moe.hpp"
#include "kernels/cuda/launch_config.hpp"
#include "kernels/cuda/moe_dot_order.hpp"
#include "kernels/moe_dot_lanes.hpp"

namespace cleave::testing::moe_dot_order_test {
namespace {

namespace kc = kernels::cuda;

constexpr int kColumns = kc::launch::kMoeColumnsPerTile;

// The one definition: the kernel's order is MoeDotOrder at kMoeDotLanes, the CPU kernel's partials (moe.cpp asserts
// its vector is kMoeDotLanes floats), and a chunk of the tile starts at a whole vector.
static_assert(std::is_same_v<kc::MoeKernelDotOrder, kc::MoeDotOrder<kernels::kMoeDotLanes>>);
static_assert(kColumns % kernels::kMoeDotLanes == 0);

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// One output as the kernel adds it: the products of each 32-column chunk written to a tile row (zeros past d),
// add_chunk per chunk, finish in the last chunk.
template <int kLanes>
float kernel_dot(const float* a, const float* b, std::int64_t d) {
  kc::MoeDotOrder<kLanes> dot;
  float acc = 0.0f;
  float row[kColumns + 1];
  for (std::int64_t c0 = 0; c0 < d; c0 += kColumns) {
    for (int j = 0; j < kColumns; ++j) row[j] = c0 + j < d ? a[c0 + j] * b[c0 + j] : 0.0f;
    const int columns = d - c0 < kColumns ? static_cast<int>(d - c0) : kColumns;
    dot.add_chunk(row, columns, c0, d);
    if (c0 + kColumns >= d) acc = dot.finish(row, c0, d);
  }
  return acc;
}

float kernel_dot(int lanes, const float* a, const float* b, std::int64_t d) {
  return lanes == 8 ? kernel_dot<8>(a, b, d) : kernel_dot<4>(a, b, d);
}

// The order of a CPU build with `lanes`-float vectors, written out (kernels/cpu/moe.cpp's dot).
float vector_order_dot(int lanes, const float* a, const float* b, std::int64_t d) {
  std::vector<float> acc(static_cast<std::size_t>(lanes), 0.0f);
  std::int64_t c = 0;
  for (; c + lanes <= d; c += lanes) {
    for (int l = 0; l < lanes; ++l) acc[static_cast<std::size_t>(l)] += a[c + l] * b[c + l];
  }
  float sum = 0.0f;
  for (float v : acc) sum += v;
  for (; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

float column_order_dot(const float* a, const float* b, std::int64_t d) {
  float sum = 0.0f;
  for (std::int64_t c = 0; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

std::vector<float> values(std::int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

const std::int64_t kWidths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 31, 32, 33, 63, 64, 65, 70, 300, 767, 768, 1025, 4099};

TEST(CudaMoeDotOrder, KernelOrderIsTheCpuTwinsBits) {
  std::mt19937 rng(20261130);
  const std::int64_t tokens = 13, k = 3, rows = tokens * k;
  for (std::int64_t d : kWidths) {
    const std::vector<float> dy = values(tokens * d, rng), src = values(rows * d, rng);
    std::vector<std::int32_t> where(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) {
      where[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7) % rows);  // every row, shuffled
    }
    std::vector<float> cpu(static_cast<std::size_t>(rows));
    kernels::cpu::moe_combine_weight_grad(dy.data(), src.data(), where.data(), cpu.data(), tokens, k, rows, d);
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* row = src.data() + where[static_cast<std::size_t>(i)] * d;
      const float got = kernel_dot<kernels::kMoeDotLanes>(dy.data() + (i / k) * d, row, d);
      ASSERT_EQ(bits(got), bits(cpu[static_cast<std::size_t>(i)]))
          << "d " << d << " output " << i << ": kernel order " << got << ", cpu " << cpu[static_cast<std::size_t>(i)];
    }
  }
}

TEST(CudaMoeDotOrder, EachLaneCountIsThatVectorWidthsOrder) {
  std::mt19937 rng(7);
  for (int lanes : {4, 8}) {
    for (std::int64_t d : kWidths) {
      for (int trial = 0; trial < 4; ++trial) {
        const std::vector<float> a = values(d, rng), b = values(d, rng);
        const float want = vector_order_dot(lanes, a.data(), b.data(), d);
        const float got = kernel_dot(lanes, a.data(), b.data(), d);
        ASSERT_EQ(bits(got), bits(want)) << "lanes " << lanes << " d " << d;
      }
    }
  }
}

// The kernel's earlier order (every product in column order onto one sum) is not the CPU's: on random rows of 768
// most outputs differ in their last bits. A kernel that regressed to it fails the GPU's MoeParity.
TEST(CudaMoeDotOrder, ColumnOrderIsNotTheCpusBits) {
  std::mt19937 rng(11);
  const int lanes = kernels::kMoeDotLanes;
  int differ = 0;
  for (int trial = 0; trial < 64; ++trial) {
    const std::vector<float> a = values(768, rng), b = values(768, rng);
    differ += bits(column_order_dot(a.data(), b.data(), 768)) != bits(vector_order_dot(lanes, a.data(), b.data(), 768));
  }
  EXPECT_GT(differ, 8) << "of 64 random dots of width 768";
}

}  // namespace
}  // namespace cleave::testing::moe_dot_order_test
