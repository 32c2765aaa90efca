// GemmShapeTable (profile key gemm_shape_efficiency): a grid point returns its own fraction, a GEMM between points is
// interpolated trilinearly in log2 of each dimension and clamped at the grid's ends, a batch counts as rows, and a
// table that is not a full grid, repeats a point or has a fraction outside (0, 1] is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/core/error.hpp"
#include "partition/gemm_shape_table.hpp"

namespace cleave::partition::gemm_shape_table_test {
namespace {

// A 2 x 2 x 2 grid over m, n in {1024, 4096}, k in {512, 2048}, fraction = 0.1 + 0.4 [m big] + 0.2 [n big] + 0.1 [k big]:
// linear in each axis's log2, so trilinear interpolation is exact for it.
std::vector<GemmShapeTable::Point> grid() {
  std::vector<GemmShapeTable::Point> points;
  for (double m : {4096.0, 1024.0}) {
    for (double n : {1024.0, 4096.0}) {
      for (double k : {2048.0, 512.0}) {
        points.push_back({m, n, k, 0.1 + (m > 1024 ? 0.4 : 0) + (n > 1024 ? 0.2 : 0) + (k > 512 ? 0.1 : 0)});
      }
    }
  }
  return points;
}

std::string refusal(const std::vector<GemmShapeTable::Point>& points) {
  try {
    GemmShapeTable t(points, "profile p.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GemmShapeTable, GridPointsExactInterpolatedInLogAndClamped) {
  const GemmShapeTable t(grid(), "test");
  EXPECT_DOUBLE_EQ(t.at(1024, 1024, 512), 0.1);
  EXPECT_DOUBLE_EQ(t.at(4096, 4096, 2048), 0.8);
  EXPECT_DOUBLE_EQ(t.at(4096, 1024, 512), 0.5);
  // Halfway in log2 (2048 between 1024 and 4096, 1024 between 512 and 2048): the mean of the corners.
  EXPECT_NEAR(t.at(2048, 1024, 512), 0.3, 1e-12);
  EXPECT_NEAR(t.at(2048, 2048, 1024), 0.1 + 0.2 + 0.1 + 0.05, 1e-12);
  // A quarter of the way: 1024 -> 4096 is two octaves, 1448.15 = 1024·2^0.5 is a quarter of the m axis.
  EXPECT_NEAR(t.at(1024 * std::sqrt(2.0), 1024, 512), 0.1 + 0.1, 1e-12);
  // Past the ends: the end's figure, never extrapolated.
  EXPECT_DOUBLE_EQ(t.at(65536, 65536, 65536), 0.8);
  EXPECT_DOUBLE_EQ(t.at(8, 8, 8), 0.1);
  // A batch of 4 GEMMs of 1024 rows is looked up as 4096 rows.
  EXPECT_DOUBLE_EQ(t.at(1024, 1024, 512, 4), t.at(4096, 1024, 512));
  // The points come back in m, n, k order.
  const auto points = t.points();
  ASSERT_EQ(points.size(), 8u);
  EXPECT_EQ(points.front().m, 1024);
  EXPECT_EQ(points.front().k, 512);
  EXPECT_EQ(points.back().m, 4096);
  EXPECT_DOUBLE_EQ(points.back().fraction, 0.8);
}

TEST(GemmShapeTable, NotAFullGridIsRefusedByName) {
  auto missing = grid();
  missing.pop_back();  // m 1024, n 4096, k 512
  EXPECT_NE(refusal(missing).find("not a full grid: it has no point m 1024 n 4096 k 512"), std::string::npos)
      << refusal(missing);
  auto twice = grid();
  twice.push_back(twice.front());
  EXPECT_NE(refusal(twice).find("has the point m 4096 n 1024 k 2048 twice"), std::string::npos) << refusal(twice);
  auto over = grid();
  over[0].fraction = 1.2;
  EXPECT_NE(refusal(over).find("fraction of the peak must be in (0, 1]"), std::string::npos) << refusal(over);
  auto zero = grid();
  zero[0].k = 0;
  EXPECT_NE(refusal(zero).find("m, n and k must be > 0"), std::string::npos) << refusal(zero);
  EXPECT_NE(refusal({}).find("has no points"), std::string::npos);
}

}  // namespace
}  // namespace cleave::partition::gemm_shape_table_test
