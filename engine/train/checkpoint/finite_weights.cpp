// Non-finite weights refused (finite_weights.hpp).
#include "engine/train/checkpoint/finite_weights.hpp"

#include <cmath>
#include <cstddef>

#include "engine/core/error.hpp"

namespace cleave::train {

void check_finite_weights(std::string_view source, std::string_view name, std::span<const float> values) {
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return;
  CLEAVE_THROW("{}: tensor {} holds {} non-finite value{} of {} (first: element {} is {}); nothing was loaded. The "
               "file is damaged or was saved from a diverged model: convert or download it again",
               source, name, bad, bad == 1 ? "" : "s", values.size(), first, values[first]);
}

}  // namespace cleave::train
