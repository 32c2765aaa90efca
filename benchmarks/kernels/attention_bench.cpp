// Attention forward + backward on the CPU: the memory-efficient kernel (kernels/cpu/flash_attention.hpp, what the
// seam runs) against the probabilities path it replaced (kernels/cpu/attention_probs.hpp, kept as a reference),
// at T = 512, 2048, 8192 with B = 1, H = 4, head_dim 64 (causal, packed qkv [B, T, 3 H hd]).
//
// What it asserts before timing: at T = 512 both paths' out and dqkv agree within 1e-4 (+ 1e-4 relative); else
// it exits non-zero. What it reports per T and path: the median wall time of forward + backward over the
// repetitions (after one warm-up call), the GFLOP/s of the causal half of the products (the minimal work,
// 2 x 2 T^2 hd H B / 2 forward and 4 x ... backward, as FlashAttention papers count), and the bytes each path
// keeps from forward to backward (stash) and allocates as scratch in the backward (workspace), exactly as
// allocated here: the flash path stashes out + lse, the probabilities path out + probs [B, H, T, T] and needs
// dprobs [B, H, T, T] of workspace.
//
// Usage: attention_bench [repetitions=3] [max_T=8192]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/attention_probs.hpp"
#include "benchmarks/kernels/random_operands.hpp"
#include "kernels/cpu/flash_attention.hpp"

namespace {

namespace kc = cleave::kernels::cpu;
using Clock = std::chrono::steady_clock;

constexpr int64_t kB = 1, kH = 4, kHd = 64;

using cleave::bench::random_vec;

kc::FlashAttentionShape packed_shape(int64_t t) {
  kc::FlashAttentionShape s;
  s.batch = kB;
  s.q_len = s.kv_len = t;
  s.q_heads = s.kv_heads = kH;
  s.head_dim = kHd;
  s.ld_q = s.ld_k = s.ld_v = 3 * kH * kHd;
  s.ld_o = kH * kHd;
  s.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
  return s;
}

struct Result {
  double seconds = 0;
  double stash_bytes = 0, workspace_bytes = 0;
};

struct Buffers {
  std::vector<float> qkv, dout, out, dqkv;
};

Buffers buffers(int64_t t) {
  Buffers b;
  b.qkv = random_vec(static_cast<size_t>(kB * t * 3 * kH * kHd), 1);
  b.dout = random_vec(static_cast<size_t>(kB * t * kH * kHd), 2);
  b.out.assign(b.dout.size(), 0.0f);
  b.dqkv.assign(b.qkv.size(), 0.0f);
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result run_flash(Buffers& b, int64_t t, int reps) {
  const kc::FlashAttentionShape s = packed_shape(t);
  const int threads = omp_get_max_threads();
  std::vector<float> lse(static_cast<size_t>(kB * kH * t));
  std::vector<float> ws(kc::flash_attention_workspace_floats(s, threads));
  const float* q = b.qkv.data();
  const float* k = q + kH * kHd;
  const float* v = q + 2 * kH * kHd;
  float* dq = b.dqkv.data();
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    kc::flash_attention_forward(q, k, v, b.out.data(), lse.data(), s, ws.data(), threads);
    kc::flash_attention_backward(q, k, v, b.out.data(), lse.data(), b.dout.data(), dq, dq + kH * kHd,
                                 dq + 2 * kH * kHd, s, false, ws.data(), threads);
    if (r > 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {median(times), static_cast<double>(b.out.size() + lse.size()) * 4, static_cast<double>(ws.size()) * 4};
}

Result run_probs(Buffers& b, int64_t t, int reps) {
  std::vector<float> probs(static_cast<size_t>(kB * kH * t * t)), dprobs(probs.size());
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    kc::attention_probs_forward(b.qkv.data(), b.out.data(), probs.data(), kB, t, kH, kHd);
    kc::attention_probs_backward(b.dout.data(), b.qkv.data(), probs.data(), b.dqkv.data(), dprobs.data(), kB, t, kH,
                                 kHd);
    if (r > 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {median(times), static_cast<double>(b.out.size() + probs.size()) * 4, static_cast<double>(dprobs.size()) * 4};
}

bool validate() {
  const int64_t t = 512;
  Buffers a = buffers(t), b = buffers(t);
  run_flash(a, t, 1);
  run_probs(b, t, 1);
  auto worst = [](const std::vector<float>& x, const std::vector<float>& y) {
    double w = 0;
    for (size_t i = 0; i < x.size(); ++i) w = std::max(w, std::fabs(x[i] - y[i]) / (1e-4 + 1e-4 * std::fabs(y[i])));
    return w;
  };
  const double wo = worst(a.out, b.out), wd = worst(a.dqkv, b.dqkv);
  std::printf("validation at T=%lld: worst |flash - probs| / (1e-4 + 1e-4 |probs|): out %.3f, dqkv %.3f (must be <= 1)\n",
              static_cast<long long>(t), wo, wd);
  return wo <= 1.0 && wd <= 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 3;
  const int64_t max_t = argc > 2 ? std::atoll(argv[2]) : 8192;
  std::printf("attention forward + backward, B=%lld H=%lld head_dim=%lld causal, f32, %d OpenMP threads, median of %d\n",
              static_cast<long long>(kB), static_cast<long long>(kH), static_cast<long long>(kHd),
              omp_get_max_threads(), reps);
  if (!validate()) {
    std::fprintf(stderr, "attention_bench: the two paths disagree; not timing\n");
    return 1;
  }
  std::printf("%6s  %-13s %10s %10s %14s %14s\n", "T", "path", "time ms", "GFLOP/s", "stash MiB", "workspace MiB");
  for (int64_t t : {int64_t{512}, int64_t{2048}, int64_t{8192}}) {
    if (t > max_t) break;
    // Minimal (causal-half) FLOPs: forward S and PV, backward S, dP, dV, dQ, dK.
    const double flops = 7.0 * 2.0 * static_cast<double>(kB * kH) * static_cast<double>(t) * t * kHd / 2.0;
    for (const char* path : {"flash", "probabilities"}) {
      Buffers b = buffers(t);
      const bool flash = path[0] == 'f';
      const Result r = flash ? run_flash(b, t, reps) : run_probs(b, t, reps);
      std::printf("%6lld  %-13s %10.1f %10.1f %14.2f %14.2f\n", static_cast<long long>(t), path, r.seconds * 1e3,
                  flops / r.seconds * 1e-9, r.stash_bytes / 1048576.0, r.workspace_bytes / 1048576.0);
      std::fflush(stdout);
    }
  }
  return 0;
}
