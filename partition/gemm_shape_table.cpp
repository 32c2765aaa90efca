// See gemm_shape_table.hpp.
#include "partition/gemm_shape_table.hpp"

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

// The cell of `axis` holding x (clamped) and x's position in it, 0..1, in log2.
std::pair<std::size_t, double> locate(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  std::size_t i = 0;
  while (axis[i + 1] < x) ++i;
  return {i, (std::log2(x) - std::log2(axis[i])) / (std::log2(axis[i + 1]) - std::log2(axis[i]))};
}

}  // namespace

GemmShapeTable::GemmShapeTable(const std::vector<Point>& points, const std::string& where) {
  CLEAVE_CHECK(!points.empty(), "{}: gemm_shape_efficiency has no points ([m, n, k, fraction], a full grid)", where);
  for (const Point& p : points) {
    CLEAVE_CHECK(p.m > 0 && p.n > 0 && p.k > 0, "{}: gemm_shape_efficiency point [{}, {}, {}, {}]: m, n and k must be > 0",
                 where, p.m, p.n, p.k, p.fraction);
    CLEAVE_CHECK(p.fraction > 0 && p.fraction <= 1, "{}: gemm_shape_efficiency point [{}, {}, {}, {}]: the fraction of the "
                 "peak must be in (0, 1]", where, p.m, p.n, p.k, p.fraction);
    const std::array<double, 3> dims = {p.m, p.n, p.k};
    for (std::size_t a = 0; a < 3; ++a) {
      auto& axis = axes_[a];
      if (std::find(axis.begin(), axis.end(), dims[a]) == axis.end()) axis.push_back(dims[a]);
    }
  }
  for (auto& axis : axes_) std::sort(axis.begin(), axis.end());
  const std::size_t nm = axes_[0].size(), nn = axes_[1].size(), nk = axes_[2].size();
  fraction_.assign(nm * nn * nk, 0.0);
  const auto index = [&](const std::vector<double>& axis, double x) {
    return static_cast<std::size_t>(std::find(axis.begin(), axis.end(), x) - axis.begin());
  };
  for (const Point& p : points) {
    double& slot = fraction_[(index(axes_[0], p.m) * nn + index(axes_[1], p.n)) * nk + index(axes_[2], p.k)];
    CLEAVE_CHECK(slot == 0.0, "{}: gemm_shape_efficiency has the point m {} n {} k {} twice", where, p.m, p.n, p.k);
    slot = p.fraction;
  }
  for (std::size_t i = 0; i < nm; ++i) {
    for (std::size_t j = 0; j < nn; ++j) {
      for (std::size_t l = 0; l < nk; ++l) {
        CLEAVE_CHECK(value(i, j, l) > 0, "{}: gemm_shape_efficiency is not a full grid: it has no point m {} n {} k {} "
                     "(every combination of its m, n and k values is needed: {} x {} x {} points, {} given)",
                     where, axes_[0][i], axes_[1][j], axes_[2][l], nm, nn, nk, points.size());
      }
    }
  }
}

double GemmShapeTable::value(std::size_t i, std::size_t j, std::size_t l) const {
  return fraction_[(i * axes_[1].size() + j) * axes_[2].size() + l];
}

double GemmShapeTable::at(double m, double n, double k, double batch) const {
  CLEAVE_ASSERT(!empty(), "GemmShapeTable::at on an empty table");
  const auto [i, x] = locate(axes_[0], m * std::max(1.0, batch));
  const auto [j, y] = locate(axes_[1], n);
  const auto [l, z] = locate(axes_[2], k);
  const auto near = [](std::size_t c, double t, const std::vector<double>& axis, int side) {
    return axis.size() == 1 ? std::pair<std::size_t, double>{0, 1.0}
                            : std::pair<std::size_t, double>{c + static_cast<std::size_t>(side), side ? t : 1.0 - t};
  };
  double sum = 0;
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 2; ++c) {
        const auto [ii, wi] = near(i, x, axes_[0], a);
        const auto [jj, wj] = near(j, y, axes_[1], b);
        const auto [ll, wl] = near(l, z, axes_[2], c);
        // A one-value axis counts its corner once (side 0), not twice.
        if ((axes_[0].size() == 1 && a) || (axes_[1].size() == 1 && b) || (axes_[2].size() == 1 && c)) continue;
        sum += wi * wj * wl * value(ii, jj, ll);
      }
    }
  }
  return sum;
}

std::vector<GemmShapeTable::Point> GemmShapeTable::points() const {
  std::vector<Point> out;
  for (std::size_t i = 0; i < axes_[0].size(); ++i) {
    for (std::size_t j = 0; j < axes_[1].size(); ++j) {
      for (std::size_t l = 0; l < axes_[2].size(); ++l) out.push_back({axes_[0][i], axes_[1][j], axes_[2][l], value(i, j, l)});
    }
  }
  return out;
}

}  // namespace cleave::partition
