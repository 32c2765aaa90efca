// The CPU moe routing kernels (kernels/cpu/moe.hpp) against two references on awkward shapes: a scalar loop in f32
// that performs moe.hpp's order of operations element by element (the kernels' former scalar path), which every
// vector path (baseline, AVX2, AVX-512, AVX-512 with AVX-512 BF16 narrowing; those this CPU has) must give bit for bit at 1 and 2 threads, in every
// dtype combination (f32 and bf16 in and out); and double loops, which that scalar order must approach (so the
// order itself is checked, not only copied). Shapes: 1, 5, 7, 9, 33, 130 and 300 tokens (300 x 2 x 130 goes parallel),
// widths 6 (a tail only), 64 (whole vectors), 100 (vectors and a tail), 20, 31 and 52 (kShapes), top-k 1 to 4, experts
// left without tokens, with and without scales and weights; inputs hold signed zeros, subnormals and bf16 rounding ties.
#include "kernels/cpu/moe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/moe_dot_lanes.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::moe_kernels_test {
namespace {

using test::l2_norm;
using test::same_bits;

// Router.cpp's tables for tokens choosing k distinct experts among the even ones of `experts` (the odd ones get no
// token): row_token (gather index, rows grouped by expert) and token_row ([tokens, k], each slot's row).
struct Routing {
  std::vector<std::int32_t> row_token, token_row;
};

Routing routing(std::int64_t tokens, std::int64_t experts, std::int64_t k, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> used;
  for (std::int32_t e = 0; e < experts; e += 2) used.push_back(e);
  std::vector<std::int32_t> expert(static_cast<std::size_t>(tokens * k));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(experts), 0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::shuffle(used.begin(), used.end(), rng);
    std::sort(used.begin(), used.begin() + k);
    for (std::int64_t j = 0; j < k; ++j) {
      expert[static_cast<std::size_t>(t * k + j)] = used[static_cast<std::size_t>(j)];
      ++counts[static_cast<std::size_t>(used[static_cast<std::size_t>(j)])];
    }
  }
  std::vector<std::int64_t> next(static_cast<std::size_t>(experts), 0);
  for (std::size_t e = 1; e < next.size(); ++e) next[e] = next[e - 1] + counts[e - 1];
  Routing r;
  r.row_token.resize(expert.size());
  r.token_row.resize(expert.size());
  for (std::size_t s = 0; s < expert.size(); ++s) {
    const std::int64_t row = next[static_cast<std::size_t>(expert[s])]++;
    r.row_token[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(s / static_cast<std::size_t>(k));
    r.token_row[s] = static_cast<std::int32_t>(row);
  }
  return r;
}

// Random values with every few a signed zero, a subnormal or a value that lies on (or just off) a bf16 rounding tie.
// spread: the values scaled by 2^-e, e uniform in [0, spread - 1], so that f32 sums round: 11 for sums of bf16
// products (products of values of one binade, 8 significant bits each, mostly add exactly, and then no order of the
// additions could be told apart), 24 for sums of bf16 values themselves (one rounds only 16 binades below the sum).
std::vector<float> awkward(std::size_t n, std::uint64_t seed, int spread = 0) {
  std::vector<float> v = test::random_floats(n, seed);
  if (spread > 0) {
    std::mt19937_64 rng(seed ^ 0x5eedu);
    std::uniform_int_distribution<int> e(0, spread - 1);
    for (float& x : v) x = std::ldexp(x, -e(rng));
  }
  const std::uint32_t special[] = {0x00000000u, 0x80000000u, 0x00012345u, 0x80400001u, 0x3f808000u, 0x3f818000u,
                                   0xbf807fffu, 0x00008000u};
  for (std::size_t i = 0; i < n; i += 5) v[i] = std::bit_cast<float>(special[(i / 5) % 8]);
  return v;
}

// An operand in dtype T: f32 values, or bf16 patterns of them (narrowed) with their widened values beside.
template <class T>
struct Operand {
  std::vector<T> data;
  std::vector<float> f32;  // the values the kernel reads, widened
};
template <class T>
Operand<T> operand(std::size_t n, std::uint64_t seed, int spread = 0) {
  const std::vector<float> v = awkward(n, seed, spread);
  if constexpr (std::is_same_v<T, float>) {
    return {v, v};
  } else {
    std::vector<std::uint16_t> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = float_to_bf16(v[i]);
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = bf16_to_float(b[i]);
    return {b, w};
  }
}

template <class T>
T store_as(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return float_to_bf16(v);
  }
}
template <class T>
float as_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return bf16_to_float(v);
  }
}

// moe.hpp's order, one element at a time in f32 (no contraction into FMA: the kernels never contract).
__attribute__((optimize("fp-contract=off"))) float scalar_dot(const float* a, const float* b, std::int64_t d) {
  constexpr std::int64_t lanes = kMoeDotLanes;  // moe.hpp's partial sums (kernels/moe_dot_lanes.hpp)
  float part[lanes] = {};
  std::int64_t c = 0;
  for (; c + lanes <= d; c += lanes)
    for (std::int64_t l = 0; l < lanes; ++l) part[l] += a[c + l] * b[c + l];
  float sum = 0.0f;
  for (std::int64_t l = 0; l < lanes; ++l) sum += part[l];
  for (; c < d; ++c) sum += a[c] * b[c];
  return sum;
}
__attribute__((optimize("fp-contract=off"))) float scalar_combine(const float* src, const std::int32_t* rows,
                                                                  const float* w, std::int64_t k, std::int64_t d,
                                                                  std::int64_t c) {
  float acc = 0.0f;
  for (std::int64_t j = 0; j < k; ++j) acc += (w != nullptr ? w[j] : 1.0f) * src[rows[j] * d + c];
  return acc;
}

// Every vector path this CPU has: baseline, AVX2, AVX-512, AVX-512 with AVX-512 BF16's narrowing.
struct Path {
  VectorIsa isa;
  bool bf16_insn;
  std::string name;
};
std::vector<Path> paths() {
  std::vector<Path> out;
  for (const Path& p : {Path{VectorIsa::kBaseline, false, "baseline"}, Path{VectorIsa::kAvx2, false, "avx2"},
                        Path{VectorIsa::kAvx512, false, "avx512"}}) {
    if (vector_isa_available(p.isa)) out.push_back(p);
  }
  if (avx512_bf16_available()) out.push_back({VectorIsa::kAvx512, true, "avx512 with avx512_bf16"});
  return out;
}

struct Shape {
  std::int64_t tokens, d, k;
};

template <class In, class Out>
void check_gather_and_combine(const Shape& s, bool scaled, std::uint64_t seed) {
  const std::int64_t experts = 8, r = s.tokens * s.k;
  const Routing route = routing(s.tokens, experts, s.k, seed);
  const Operand<In> x = operand<In>(static_cast<std::size_t>(s.tokens * s.d), seed + 1);
  // src over 24 binades: unscaled, the combine adds bf16 values, which of one binade add exactly (then a kernel that
  // added the k rows in another order would pass; checked by reversing the k loop for bf16 src without weights).
  const Operand<In> src = operand<In>(static_cast<std::size_t>(r * s.d), seed + 2, 24);
  const std::vector<float> scale = test::random_floats(static_cast<std::size_t>(r), seed + 3);
  const float* sc = scaled ? scale.data() : nullptr;
  // The scalar order and the double reference.
  std::vector<Out> want_g(static_cast<std::size_t>(r * s.d)), want_c(static_cast<std::size_t>(s.tokens * s.d));
  std::vector<double> exact_c(want_c.size());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t c = 0; c < s.d; ++c) {
      const float v = x.f32[static_cast<std::size_t>(route.row_token[static_cast<std::size_t>(i)] * s.d + c)];
      want_g[static_cast<std::size_t>(i * s.d + c)] = store_as<Out>((scaled ? scale[static_cast<std::size_t>(i)] : 1.0f) * v);
    }
  for (std::int64_t n = 0; n < s.tokens; ++n)
    for (std::int64_t c = 0; c < s.d; ++c) {
      const std::size_t at = static_cast<std::size_t>(n * s.d + c);
      const std::int32_t* rows = route.token_row.data() + n * s.k;
      want_c[at] = store_as<Out>(scalar_combine(src.f32.data(), rows, scaled ? sc + n * s.k : nullptr, s.k, s.d, c));
      for (std::int64_t j = 0; j < s.k; ++j)
        exact_c[at] += (scaled ? double(sc[n * s.k + j]) : 1.0) * src.f32[static_cast<std::size_t>(rows[j] * s.d + c)];
    }
  std::vector<float> got_c_f32(want_c.size());
  for (std::size_t i = 0; i < want_c.size(); ++i) got_c_f32[i] = as_float(want_c[i]);
  const double tol = std::is_same_v<Out, float> ? 1e-5 : 1e-2;
  test::expect_close(got_c_f32, exact_c, tol, tol, "the scalar order against double");
  EXPECT_GT(l2_norm(got_c_f32), 0.0);
  for (const Path& p : paths()) {
    test::for_each_thread_count({1, 2}, [&](int threads) {
      const std::string what = p.name + ", " + std::to_string(threads) +
                               " threads, tokens " + std::to_string(s.tokens) + " d " + std::to_string(s.d) +
                               " k " + std::to_string(s.k) + (scaled ? ", scaled" : ", unscaled");
      std::vector<Out> g(want_g.size(), store_as<Out>(std::nanf(""))), c(want_c.size(), store_as<Out>(std::nanf("")));
      moe_gather_isa(p.isa, p.bf16_insn, x.data.data(), route.row_token.data(), sc, g.data(), r, s.tokens, s.d);
      EXPECT_TRUE(same_bits(g, want_g)) << "moe_gather, " << what;
      moe_combine_isa(p.isa, p.bf16_insn, src.data.data(), route.token_row.data(), sc, c.data(), s.tokens, s.k, r, s.d);
      EXPECT_TRUE(same_bits(c, want_c)) << "moe_combine, " << what;
    });
  }
}

template <class Dy, class Src>
void check_weight_grad(const Shape& s, std::uint64_t seed) {
  const std::int64_t experts = 8, r = s.tokens * s.k;
  const Routing route = routing(s.tokens, experts, s.k, seed);
  const Operand<Dy> dy = operand<Dy>(static_cast<std::size_t>(s.tokens * s.d), seed + 4, 11);
  const Operand<Src> src = operand<Src>(static_cast<std::size_t>(r * s.d), seed + 5, 11);
  std::vector<float> want(static_cast<std::size_t>(r));
  std::vector<double> exact(want.size());
  for (std::int64_t i = 0; i < r; ++i) {
    const float* a = dy.f32.data() + (i / s.k) * s.d;
    const float* b = src.f32.data() + route.token_row[static_cast<std::size_t>(i)] * s.d;
    want[static_cast<std::size_t>(i)] = scalar_dot(a, b, s.d);
    for (std::int64_t c = 0; c < s.d; ++c) exact[static_cast<std::size_t>(i)] += double(a[c]) * b[c];
  }
  test::expect_close(want, exact, 1e-5, 1e-4, "the scalar dot against double");
  EXPECT_GT(l2_norm(want), 0.0);
  for (const Path& p : paths()) {
    test::for_each_thread_count({1, 2}, [&](int threads) {
      std::vector<float> got = test::poisoned(want.size());
      moe_combine_weight_grad_isa(p.isa, p.bf16_insn, dy.data.data(), src.data.data(), route.token_row.data(), got.data(),
                                  s.tokens, s.k, r, s.d);
      EXPECT_TRUE(same_bits(got, want)) << "moe_combine_weight_grad, " << p.name << ", "
                                        << threads << " threads, tokens " << s.tokens << " d " << s.d << " k "
                                        << s.k;
    });
  }
}

// The weight gradient's packed loops (moe_paths.hpp: 4 or 8 dots a group, 32 bf16 columns at a time on AVX-512, then
// one vector, then up to 3 whole partial vectors, then the tail) meet each of their exits: 20 = 16 + 4, 31 = 16 + 12 + 3,
// 52 = 32 + 16 + 4; 14, 27 and 33 dots leave a group partly used; k 3 puts a group's dots across tokens unevenly.
const Shape kShapes[] = {{1, 6, 1},   {1, 64, 2},    {7, 100, 2},   {7, 6, 2},   {130, 64, 1},
                         {130, 100, 2}, {300, 130, 2}, {9, 52, 3}, {5, 20, 4}, {33, 31, 1}};

TEST(MoeKernels, EveryIsaPathGivesTheBitsOfTheScalarOrder) {
  std::uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    for (bool scaled : {false, true}) {
      check_gather_and_combine<float, float>(s, scaled, seed++);
      check_gather_and_combine<float, std::uint16_t>(s, scaled, seed++);
      check_gather_and_combine<std::uint16_t, float>(s, scaled, seed++);
      check_gather_and_combine<std::uint16_t, std::uint16_t>(s, scaled, seed++);
    }
    check_weight_grad<float, float>(s, seed++);
    check_weight_grad<float, std::uint16_t>(s, seed++);
    check_weight_grad<std::uint16_t, float>(s, seed++);
    check_weight_grad<std::uint16_t, std::uint16_t>(s, seed++);
  }
}

TEST(MoeKernels, AnIndexOutsideItsRangeIsNamed) {
  const std::vector<float> x(12, 1.0f);
  std::vector<float> out(12);
  const std::vector<std::int32_t> index = {0, 2, 3};  // x has 3 rows of 4: 3 is outside
  try {
    moe_gather(x.data(), index.data(), nullptr, out.data(), 3, 3, 4);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("index[2] = 3 is outside [0, 3)"), std::string::npos) << e.what();
  }
  const std::vector<std::int32_t> rows = {0, -1};
  EXPECT_THROW(moe_combine(x.data(), rows.data(), nullptr, out.data(), 1, 2, 3, 4), std::exception);
  EXPECT_THROW(moe_combine_weight_grad(x.data(), x.data(), rows.data(), out.data(), 1, 2, 3, 4), std::exception);
}

}  // namespace
}  // namespace cleave::kernels::cpu::moe_kernels_test
