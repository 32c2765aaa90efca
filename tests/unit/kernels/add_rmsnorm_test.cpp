// The residual forms of the RMSNorm kernels (add_rmsnorm_forward / add_rmsnorm_backward_input, rmsnorm.hpp): against
// double references on rows 1 / 17 / 130 by widths 6 / 64 / 96 (and widths off the 16-lane sums); bit for bit the
// unfused pair (add, then rmsnorm_forward on the sum; rmsnorm_backward_input, then add_inplace) on every vector
// path this CPU has, in place (r over x, dx over dres) as the Llama block calls them; every path the baseline's
// bits; 1 and 2 threads the same bits.
#include "kernels/cpu/rmsnorm.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"
#include "kernels/cpu/elementwise.hpp"

namespace cleave::kernels::cpu::add_rmsnorm_test {
namespace {

constexpr float kEps = 1e-5f;

const std::pair<int64_t, int64_t> kShapes[] = {{1, 6},  {1, 64},  {1, 96},  {17, 6}, {17, 64}, {17, 96},
                                               {130, 6}, {130, 64}, {130, 96}, {5, 17}, {3, 1},  {9, 300}};

std::string at(int64_t rows, int64_t cols) {
  std::ostringstream s;
  s << '[' << rows << ", " << cols << ']';
  return s.str();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Inputs {
  std::vector<float> x, y, w, dy, dres;
};

Inputs inputs(int64_t rows, int64_t cols, uint64_t seed) {
  const auto n = static_cast<size_t>(rows * cols);
  return {test::random_floats(n, seed, 2.0f), test::random_floats(n, seed + 1, 1.5f),
          test::random_floats(static_cast<size_t>(cols), seed + 2), test::random_floats(n, seed + 3),
          test::random_floats(n, seed + 4)};
}

struct Outputs {
  std::vector<float> r, out, rstd, dx;
};

// The fused kernels as the block calls them: r written over x, dx over a copy of dres.
Outputs fused(VectorIsa isa, const Inputs& in, int64_t rows, int64_t cols) {
  Outputs o{in.x, test::poisoned(in.x.size()), test::poisoned(static_cast<size_t>(rows)), in.dres};
  add_rmsnorm_forward_isa(isa, o.r.data(), in.y.data(), in.w.data(), o.r.data(), o.out.data(), o.rstd.data(), rows,
                          cols, kEps);
  add_rmsnorm_backward_input_isa(isa, in.dy.data(), o.dx.data(), o.r.data(), in.w.data(), o.rstd.data(), o.dx.data(),
                                 rows, cols);
  return o;
}

// The unfused pair on the same path.
Outputs unfused(VectorIsa isa, const Inputs& in, int64_t rows, int64_t cols) {
  Outputs o{test::poisoned(in.x.size()), test::poisoned(in.x.size()), test::poisoned(static_cast<size_t>(rows)),
            test::poisoned(in.x.size())};
  add(in.x.data(), in.y.data(), o.r.data(), rows * cols);
  rmsnorm_forward_isa(isa, o.r.data(), in.w.data(), o.out.data(), o.rstd.data(), rows, cols, kEps);
  rmsnorm_backward_input_isa(isa, in.dy.data(), o.r.data(), in.w.data(), o.rstd.data(), o.dx.data(), rows, cols);
  add_inplace(o.dx.data(), in.dres.data(), rows * cols);
  return o;
}

void expect_same(const Outputs& got, const Outputs& want, const std::string& what) {
  EXPECT_TRUE(same_bits(got.r, want.r)) << "r, " << what;
  EXPECT_TRUE(same_bits(got.out, want.out)) << "out, " << what;
  EXPECT_TRUE(same_bits(got.rstd, want.rstd)) << "rstd, " << what;
  EXPECT_TRUE(same_bits(got.dx, want.dx)) << "dx, " << what;
}

TEST(KernelAddRmsNorm, MatchesDoubleReference) {
  for (auto [rows, cols] : kShapes) {
    const Inputs in = inputs(rows, cols, 11);
    const Outputs o = fused(best_vector_isa(), in, rows, cols);
    std::vector<double> want_out(in.x.size()), want_rstd(static_cast<size_t>(rows)), want_dx(in.x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double sq = 0.0, dot = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        // The sum itself is one f32 addition, exactly what r must hold.
        ASSERT_EQ(o.r[i], in.x[i] + in.y[i]) << "r element " << i << " " << at(rows, cols);
        const double v = double(in.x[i]) + double(in.y[i]);
        sq += v * v;
        dot += double(in.dy[i]) * in.w[c] * v;
      }
      const double rs = 1.0 / std::sqrt(sq / double(cols) + double(kEps));
      want_rstd[r] = rs;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const double v = double(in.x[i]) + double(in.y[i]);
        want_out[i] = v * rs * in.w[c];
        want_dx[i] = rs * in.w[c] * in.dy[i] - v * rs * rs * rs / double(cols) * dot + in.dres[i];
      }
    }
    test::expect_close(o.out, want_out, 1e-5, 1e-5, "add_rmsnorm out " + at(rows, cols));
    test::expect_close(o.rstd, want_rstd, 1e-5, 1e-5, "add_rmsnorm rstd " + at(rows, cols));
    test::expect_close(o.dx, want_dx, 1e-4, 1e-4, "add_rmsnorm dx " + at(rows, cols));
    EXPECT_GT(test::l2_norm(o.out), 0.0);
    EXPECT_GT(test::l2_norm(o.dx), 0.0);
  }
}

// The contract the Llama block relies on: the fused op is the unfused pair, bit for bit, on every path; and every
// path gives the baseline's bits (an infinity and a NaN in rows that are a full vector on one path, a tail on
// another, propagate the same way).
TEST(KernelAddRmsNorm, EveryIsaPathGivesTheUnfusedPairsBits) {
  double norm = 0.0;
  for (auto [rows, cols] : kShapes) {
    Inputs in = inputs(rows, cols, 21);
    if (rows >= 3) {
      in.x[static_cast<size_t>(2 * cols - 1)] = std::numeric_limits<float>::infinity();
      in.y[static_cast<size_t>(2 * cols)] = std::numeric_limits<float>::quiet_NaN();
    }
    const Outputs base = fused(VectorIsa::kBaseline, in, rows, cols);
    for (float v : base.dx) norm += std::isfinite(v) ? std::fabs(v) : 0.0;
    test::for_each_isa_path(test::kEveryIsaPath, [&](VectorIsa isa) {
      const std::string what = test::isa_label(isa) + " " + at(rows, cols);
      const Outputs got = fused(isa, in, rows, cols);
      expect_same(got, unfused(isa, in, rows, cols), "fused vs unfused, " + what);
      expect_same(got, base, "vs the baseline path, " + what);
    });
  }
  EXPECT_GT(norm, 0.0);
}

TEST(KernelAddRmsNorm, OneAndTwoThreadsGiveTheSameBits) {
  const int saved = omp_get_max_threads();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{17, 96}, {1024, 128}, {520, 260}}) {
    const Inputs in = inputs(rows, cols, 31);
    omp_set_num_threads(1);
    const Outputs one = fused(best_vector_isa(), in, rows, cols);
    omp_set_num_threads(2);
    const Outputs two = fused(best_vector_isa(), in, rows, cols);
    omp_set_num_threads(saved);
    expect_same(one, two, at(rows, cols));
    EXPECT_GT(test::l2_norm(one.dx), 0.0);
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::add_rmsnorm_test
