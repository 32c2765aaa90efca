// GemmShapeTable: a library GEMM's measured efficiency by its shape (profile key gemm_shape_efficiency; docs/planner.md,
// "GEMM efficiency by shape"): a full grid of timed GEMMs, each (m, n, k, fraction of the peak), every combination of
// the grid's m, n and k values present. A GEMM between the points is interpolated trilinearly in log2 m, log2 n and
// log2 k, and clamped to the grid's ends (a dimension past the largest measured one takes the largest one's figure,
// below the smallest the smallest's). A batch of b independent GEMMs is looked up as one of b·m rows: its tiles are
// b·ceil(m / tm)·ceil(n / tn), as one GEMM of b·m rows (the table's own source measured batched GEMMs that way).
// Invariant: every fraction is in (0, 1]; the axes are strictly increasing and positive; at a grid point the lookup
// returns that point's fraction exactly.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace cleave::partition {

class GemmShapeTable {
 public:
  struct Point {
    double m = 0, n = 0, k = 0, fraction = 0;
  };
  GemmShapeTable() = default;
  // Builds the grid from its points in any order; throws Error naming `where` and the missing or repeated point, a
  // non-positive dimension or a fraction outside (0, 1].
  GemmShapeTable(const std::vector<Point>& points, const std::string& where);

  bool empty() const { return fraction_.empty(); }
  // The fraction of the peak a GEMM of m x n x k reaches (batch: see the header).
  double at(double m, double n, double k, double batch = 1) const;
  // The points in m, n, k order (the file form).
  std::vector<Point> points() const;

 private:
  std::array<std::vector<double>, 3> axes_;  // m, n, k values, increasing
  std::vector<double> fraction_;             // [i_m][i_n][i_k], k fastest
  double value(std::size_t i, std::size_t j, std::size_t l) const;
};

}  // namespace cleave::partition
