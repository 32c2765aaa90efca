// Gradient norm (deterministic chunked double accumulation) and clipping.
#include "engine/optim/grad_clip.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/error.hpp"

namespace cleave::optim {
constexpr std::int64_t kChunk = std::int64_t{1} << 16;

double sum_of_squares(const float* g, std::int64_t n) {
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t end = std::min(n, (c + 1) * kChunk);
    double s = 0.0;
    for (std::int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    partial[static_cast<std::size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}


double local_grad_sum_of_squares(const ParamList& params, const ParamFilter& counted) {
  double total = 0.0;
  for (const auto& p : unique_params(params)) {
    if (counted && !counted(*p)) continue;
    CLEAVE_CHECK(p->grad.dtype() == DType::kF32 && p->grad.device().is_cpu(),
                 "grad norm: parameter {} has a {} grad on {}; expected f32 on cpu", p->name,
                 dtype_name(p->grad.dtype()), p->grad.device().str());
    total += sum_of_squares(p->grad.data<float>(), p->grad.numel());
  }
  return total;
}

double global_grad_norm(const ParamList& params, const SumReducer& all_reduce_sum, const ParamFilter& counted) {
  double sum = local_grad_sum_of_squares(params, counted);
  if (all_reduce_sum) sum = all_reduce_sum(sum);
  return std::sqrt(sum);
}

double clip_grads(const ParamList& params, double max_norm, double norm) {
  if (max_norm <= 0.0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  const float factor = static_cast<float>(scale);
  for (const auto& p : unique_params(params)) {
    float* g = p->grad.data<float>();
    const std::int64_t n = p->grad.numel();
#pragma omp parallel for simd schedule(static) if (n >= (std::int64_t{1} << 15))
    for (std::int64_t i = 0; i < n; ++i) g[i] *= factor;
  }
  return scale;
}

}  // namespace cleave::optim
