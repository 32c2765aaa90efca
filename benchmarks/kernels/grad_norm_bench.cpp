// The gradient norm's sum of squares on a GPT-2-small gradient set (124,439,808 f32 values in its 148 tensors:
// wte 50257 x 768, wpe 1024 x 768, 12 blocks of LayerNorms, c_attn, c_proj, c_fc, mlp c_proj with biases, ln_f)
// through the op seam on the CPU: ops::sum_squares_many (the rounded double sum, chunked in a fixed order) against
// ops::sum_squares_exact (the exact fixed-point sum the trainer uses, kernels/exact_square_sum.hpp).
//
// What it asserts before timing: the two agree within 1e-12 relative, and the exact sum's double has the same bits
// for the tensors in reverse order; else it exits non-zero. What it reports: the median wall time of each over
// interleaved repetitions (the machine may be shared: compare the ratio), at the OpenMP thread count given
// (default: all). Usage: grad_norm_bench [repetitions=7]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops/ops.hpp"

namespace {

using namespace cleave;

std::vector<std::vector<std::int64_t>> gpt2_small_shapes() {
  const std::int64_t d = 768, v = 50257, ctx = 1024, ff = 3072;
  std::vector<std::vector<std::int64_t>> shapes = {{v, d}, {ctx, d}};
  for (int layer = 0; layer < 12; ++layer) {
    for (auto s : std::vector<std::vector<std::int64_t>>{{d}, {d}, {d, 3 * d}, {3 * d}, {d, d}, {d}, {d}, {d},
                                                          {d, ff}, {ff}, {ff, d}, {d}}) {
      shapes.push_back(s);
    }
  }
  shapes.push_back({d});
  shapes.push_back({d});
  return shapes;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1e-3f);
  std::vector<Tensor> grads;
  std::int64_t total = 0;
  for (const auto& shape : gpt2_small_shapes()) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    std::vector<float> values(static_cast<std::size_t>(n));
    for (float& x : values) x = dist(rng);
    grads.push_back(Tensor::from_floats(values, Shape{n}));
    total += n;
  }
  const ops::Context cpu;
  const double rounded = ops::sum_squares_many(cpu, grads);
  const double exact = ops::sum_squares_exact(cpu, grads).to_double();
  std::vector<Tensor> reversed(grads.rbegin(), grads.rend());
  const double exact_reversed = ops::sum_squares_exact(cpu, reversed).to_double();
  if (std::abs(exact - rounded) > 1e-12 * exact || std::memcmp(&exact, &exact_reversed, sizeof exact) != 0) {
    std::fprintf(stderr, "grad_norm_bench: exact %.17g, reversed %.17g, rounded %.17g disagree\n", exact,
                 exact_reversed, rounded);
    return 1;
  }
  std::vector<double> t_rounded, t_exact;
  for (int r = 0; r < reps; ++r) {
    auto t = std::chrono::steady_clock::now();
    volatile double a = ops::sum_squares_many(cpu, grads);
    t_rounded.push_back(ms_since(t));
    t = std::chrono::steady_clock::now();
    volatile double b = ops::sum_squares_exact(cpu, grads).to_double();
    t_exact.push_back(ms_since(t));
    (void)a;
    (void)b;
  }
  const double mr = median(t_rounded), me = median(t_exact);
  std::printf("grad_norm_bench: %lld values in %zu tensors, %d OpenMP threads, %d interleaved repetitions\n",
              static_cast<long long>(total), grads.size(), omp_get_max_threads(), reps);
  std::printf("  sum_squares_many (rounded double) : %8.1f ms median (%.2f GB/s)\n", mr, 4.0 * total / mr / 1e6);
  std::printf("  sum_squares_exact (exact digits)  : %8.1f ms median (%.2f GB/s), %.2fx\n", me,
              4.0 * total / me / 1e6, me / mr);
  std::printf("  norm %.17g (exact) vs %.17g (rounded), relative difference %.2e\n", std::sqrt(exact),
              std::sqrt(rounded), std::abs(exact - rounded) / exact);
  return 0;
}
