// GELU forward and backward (kernels/cpu/gelu.hpp) on the small GPT's MLP activation (16 x 64 tokens x 1024
// hidden = 1,048,576 elements), one thread, on every vector path this CPU has (baseline x86-64, AVX2,
// AVX-512), with the speed-up against the baseline path.
//
// What it asserts before timing: every path's output equals the baseline path's bit for bit, and the baseline
// matches the double-precision formula within 1e-6 + 1e-5 |y|; else the binary exits non-zero without
// timing. What it reports: Google Benchmark's real time per call (median of 5 repetitions after a warm-up)
// and elements per second.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/gelu.hpp"

namespace {

using cleave::kernels::cpu::VectorIsa;
namespace kc = cleave::kernels::cpu;

constexpr int64_t kElements = 16 * 64 * 1024;

std::vector<float> random_input(unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(kElements);
  for (auto& x : v) x = dist(gen);
  return v;
}

const char* isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kBaseline: return "baseline";
    case VectorIsa::kAvx2: return "avx2";
    case VectorIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool validate() {
  const auto x = random_input(1);
  const auto dy = random_input(2);
  std::vector<float> y0(kElements), dx0(kElements), y(kElements), dx(kElements);
  kc::gelu_forward_isa(VectorIsa::kBaseline, x.data(), y0.data(), kElements);
  kc::gelu_backward_isa(VectorIsa::kBaseline, x.data(), dy.data(), dx0.data(), kElements);
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < kElements; i += 97) {
    const double xi = x[static_cast<size_t>(i)];
    const double want = 0.5 * xi * (1.0 + std::tanh(k * (xi + 0.044715 * xi * xi * xi)));
    if (std::fabs(y0[static_cast<size_t>(i)] - want) > 1e-6 + 1e-5 * std::fabs(want)) {
      std::fprintf(stderr, "gelu_bench: baseline forward wrong at %lld: %g vs %g\n", static_cast<long long>(i),
                   static_cast<double>(y0[static_cast<size_t>(i)]), want);
      return false;
    }
  }
  for (VectorIsa isa : {VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    if (!kc::vector_isa_available(isa)) continue;
    kc::gelu_forward_isa(isa, x.data(), y.data(), kElements);
    kc::gelu_backward_isa(isa, x.data(), dy.data(), dx.data(), kElements);
    if (std::memcmp(y.data(), y0.data(), y.size() * 4) != 0 || std::memcmp(dx.data(), dx0.data(), dx.size() * 4) != 0) {
      std::fprintf(stderr, "gelu_bench: %s path differs from the baseline path\n", isa_name(isa));
      return false;
    }
  }
  return true;
}

void BM_GeluForward(benchmark::State& state) {
  const auto isa = static_cast<VectorIsa>(state.range(0));
  if (!kc::vector_isa_available(isa)) return state.SkipWithError("not available on this CPU");
  const auto x = random_input(3);
  std::vector<float> y(kElements);
  for (auto _ : state) {
    kc::gelu_forward_isa(isa, x.data(), y.data(), kElements);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(kElements), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(isa_name(isa));
}

void BM_GeluBackward(benchmark::State& state) {
  const auto isa = static_cast<VectorIsa>(state.range(0));
  if (!kc::vector_isa_available(isa)) return state.SkipWithError("not available on this CPU");
  const auto x = random_input(4);
  const auto dy = random_input(5);
  std::vector<float> dx(kElements);
  for (auto _ : state) {
    kc::gelu_backward_isa(isa, x.data(), dy.data(), dx.data(), kElements);
    benchmark::DoNotOptimize(dx.data());
  }
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(kElements), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(isa_name(isa));
}

BENCHMARK(BM_GeluForward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_GeluBackward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  if (!validate()) return 1;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
