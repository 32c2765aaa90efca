// Whether the column reductions of the weight gradients (the bias gradient, LayerNorm's and RMSNorm's weight
// gradients: kernels/cpu/bias.cpp, layernorm.cpp, rmsnorm.cpp) pay for an OpenMP team, f32 and bf16 operands, on the
// peer GPTs' and the Llama example's shapes. Each call runs either on one thread (omp_set_num_threads(1): a one-thread
// team, no wake-up) or on the team, each after ~70 us of serial work on the master (as a training step's other
// kernels leave the team idle between regions), the two interleaved call by call; medians of 200 calls each.
// Run it under OMP_WAIT_POLICY=passive (cleave's choice on a shared machine) and =active; the difference between the
// columns is what the team saves or costs at that shape (kernels/cpu/parallel.hpp's worth_parallel_columns).
//
// A shape below worth_parallel_columns runs on one thread either way (a ratio of 1); the table that set the threshold
// (RESULTS-2026-11-30-n-small-bf16.md) was taken on the build before it, where every shape of two blocks or more
// shared the team from 32K elements.
//
// What it asserts before timing: one thread and the team give the same bits (else it exits 1 without timing).
// build: the column_team_bench target (build/bin/)
// usage: OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive build/bin/column_team_bench
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/rmsnorm.hpp"

namespace {

using namespace cleave::kernels::cpu;

struct Operands {
  std::vector<float> dy, x, mean, rstd;
  std::vector<std::uint16_t> dy16, x16;
};

Operands make_operands(int64_t rows, int64_t cols) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Operands o;
  o.dy.resize(static_cast<size_t>(rows * cols));
  o.x.resize(o.dy.size());
  for (auto& v : o.dy) v = u(gen);
  for (auto& v : o.x) v = u(gen);
  o.mean.resize(static_cast<size_t>(rows));
  o.rstd.resize(static_cast<size_t>(rows));
  for (auto& v : o.mean) v = u(gen) * 0.1f;
  for (auto& v : o.rstd) v = 1.0f + u(gen) * 0.1f;
  o.dy16.resize(o.dy.size());
  o.x16.resize(o.x.size());
  cast_f32_to_bf16(o.dy.data(), o.dy16.data(), static_cast<int64_t>(o.dy.size()));
  cast_f32_to_bf16(o.x.data(), o.x16.data(), static_cast<int64_t>(o.x.size()));
  return o;
}

// Median microseconds of one call at `threads` and at 2, interleaved; out holds the last call's result.
void time_pair(const std::function<void(std::vector<float>&)>& call, int64_t out_size, double* serial_us,
               double* team_us) {
  std::vector<float> out(static_cast<size_t>(out_size));
  std::vector<double> t[2];
  for (int r = 0; r < 220; ++r) {
    for (int team = 0; team < 2; ++team) {
      omp_set_num_threads(team ? 2 : 1);
      std::fill(out.begin(), out.end(), 0.0f);
      const auto t0 = std::chrono::steady_clock::now();
      call(out);
      const auto t1 = std::chrono::steady_clock::now();
      volatile double s = 0;  // the master's serial work between regions
      for (int k = 0; k < 20000; ++k) s = s + k * 0.5;
      if (r >= 20) t[team].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  omp_set_num_threads(2);
  for (auto& v : t) std::sort(v.begin(), v.end());
  *serial_us = t[0][t[0].size() / 2];
  *team_us = t[1][t[1].size() / 2];
}

bool same_bits(const std::function<void(std::vector<float>&)>& call, int64_t out_size) {
  std::vector<float> one(static_cast<size_t>(out_size), 0.0f), two(one);
  omp_set_num_threads(1);
  call(one);
  omp_set_num_threads(2);
  call(two);
  return std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0;
}

struct Case {
  std::string name;
  int64_t rows, cols;
};

}  // namespace

int main() {
  const Case cases[] = {{"small gpt", 1024, 256}, {"small gpt", 1024, 768},  {"small gpt", 1024, 1024},
                        {"large gpt", 2048, 512}, {"large gpt", 2048, 1536}, {"large gpt", 2048, 2048},
                        {"llama", 512, 128}};
  std::printf("%-10s %-22s %6s %6s %5s %10s %10s %8s\n", "model", "kernel", "rows", "cols", "dtype", "1 thr us",
              "team us", "team/1");
  for (const Case& c : cases) {
    const Operands o = make_operands(c.rows, c.cols);
    const int64_t rows = c.rows, cols = c.cols;
    struct Kernel {
      const char* name;
      const char* dtype;
      int64_t out;
      std::function<void(std::vector<float>&)> call;
    };
    const Kernel kernels[] = {
        {"bias_backward", "f32", cols, [&](std::vector<float>& g) { bias_backward(o.dy.data(), g.data(), rows, cols); }},
        {"bias_backward", "bf16", cols,
         [&](std::vector<float>& g) { bias_backward(o.dy16.data(), g.data(), rows, cols); }},
        {"layernorm_weight", "f32", 2 * cols,
         [&](std::vector<float>& g) {
           layernorm_backward_weight(o.dy.data(), o.x.data(), o.mean.data(), o.rstd.data(), g.data(),
                                     g.data() + cols, rows, cols);
         }},
        {"layernorm_weight", "bf16", 2 * cols,
         [&](std::vector<float>& g) {
           layernorm_backward_weight(o.dy16.data(), o.x16.data(), o.mean.data(), o.rstd.data(), g.data(),
                                     g.data() + cols, rows, cols);
         }},
        {"rmsnorm_weight", "f32", cols,
         [&](std::vector<float>& g) {
           rmsnorm_backward_weight(o.dy.data(), o.x.data(), o.rstd.data(), g.data(), rows, cols);
         }},
        {"rmsnorm_weight", "bf16", cols,
         [&](std::vector<float>& g) {
           rmsnorm_backward_weight(o.dy16.data(), o.x16.data(), o.rstd.data(), g.data(), rows, cols);
         }},
    };
    for (const Kernel& k : kernels) {
      if (!same_bits(k.call, k.out)) {
        std::printf("%s %s [%ld, %ld]: one thread and the team differ in bits\n", k.name, k.dtype, rows, cols);
        return 1;
      }
      double one = 0, team = 0;
      time_pair(k.call, k.out, &one, &team);
      std::printf("%-10s %-22s %6ld %6ld %5s %10.1f %10.1f %8.2f\n", c.name.c_str(), k.name, rows, cols, k.dtype, one,
                  team, team / one);
    }
  }
}
