// The median of a set of timings or values, as the planner's measurements report them: the middle value, or the
// mean of the two middle values of an even count; 0 for an empty set. upper_median: the middle value, or the higher
// of the two middle values (a time some run took; `cleave profile`'s block and expert timings). Both take their
// argument by value (sorted here).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cleave::planner {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline double upper_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace cleave::planner
