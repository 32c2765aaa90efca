// Whether a streaming element-wise loop (y += x) pays for an OpenMP team: the loop serial or shared by the team,
// each after ~70 us of serial work on the master (as a training step's other kernels leave the team idle), medians of
// 1,000 iterations, for the sizes given. Run it under OMP_WAIT_POLICY=active and =passive; the difference between the
// columns is what the team saves or costs (kernels/cpu/parallel.hpp's kStreamingParallelMinElements).
// build: the streaming_team_bench target (build/bin/), or g++ -O3 -march=native -fopenmp streaming_team_bench.cpp
// usage: OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ./streaming_team_bench 32768 65536 131072 262144
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double median_us(long n, bool team, float* y, const float* x) {
  std::vector<double> t;
  for (int r = 0; r < 1000; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (team) {
#pragma omp parallel for simd schedule(static)
      for (long i = 0; i < n; ++i) y[i] += x[i];
    } else {
#pragma omp simd
      for (long i = 0; i < n; ++i) y[i] += x[i];
    }
    volatile double s = 0;  // the master's serial work between regions
    for (int k = 0; k < 20000; ++k) s = s + k * 0.5;
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  for (int a = 1; a < argc; ++a) {
    const long n = std::atol(argv[a]);
    std::vector<float> y(static_cast<size_t>(n), 1.0f), x(static_cast<size_t>(n), 2.0f);
    median_us(n, true, y.data(), x.data());  // warm-up: the team made, the pages touched
    std::printf("n %ld: serial %.1f us, team %.1f us\n", n, median_us(n, false, y.data(), x.data()),
                median_us(n, true, y.data(), x.data()));
  }
}
