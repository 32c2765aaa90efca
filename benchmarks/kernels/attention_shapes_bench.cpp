// The CPU flash-attention kernel (kernels/cpu/flash_attention.hpp) at one shape, forward + backward, for side-by-side
// runs against PyTorch's scaled_dot_product_attention (benchmarks/peers/attention_vs_torch.py drives both).
//
// Operands as the seam passes them: q, dout, out [B, T, Hq hd], k, v [B, T, Hkv hd] (separate, unpadded), causal,
// scale 1/sqrt(hd), inputs uniform in [-1, 1] from fixed seeds (q 1, k 2, v 3, dout 4). Prints one line:
//   shape B Hq Hkv T hd dtype threads reps ms <median forward+backward ms> fwd_ms <median forward ms>
// With --dump FILE it writes, after one forward + backward, the raw little-endian arrays q, k, v, dout, out, dq,
// dk, dv (f32, or bf16 bit patterns as u16) then lse (f32), in that order, for the caller to check against its
// own reference; no timing then. --value-path dots|gemm forces where bf16's value products run (kc::FlashValuePath;
// default: the CPU's choice).
//
// Usage: attention_shapes_bench B Hq Hkv T hd f32|bf16 [reps=5] [--dump FILE] [--value-path auto|dots|gemm]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cast.hpp"
#include "benchmarks/kernels/random_operands.hpp"
#include "kernels/cpu/flash_attention.hpp"

namespace {

namespace kc = cleave::kernels::cpu;
using Clock = std::chrono::steady_clock;

using cleave::bench::random_vec;

// The operands in element type T (bf16: the f32 draws narrowed to nearest even).
template <class T>
std::vector<T> as(const std::vector<float>& f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else {
    std::vector<T> out(f.size());
    kc::cast_f32_to_bf16_serial(f.data(), out.data(), static_cast<int64_t>(f.size()));
    return out;
  }
}

template <class T>
void write(std::FILE* f, const std::vector<T>& v) {
  std::fwrite(v.data(), sizeof(T), v.size(), f);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class T>
int run(const kc::FlashAttentionShape& s, int reps, const char* dtype, const char* dump, kc::FlashValuePath path) {
  const size_t nq = s.batch * s.q_len * s.ld_q, nk = s.batch * s.kv_len * s.ld_k;
  std::vector<T> q = as<T>(random_vec(nq, 1)), k = as<T>(random_vec(nk, 2)), v = as<T>(random_vec(nk, 3));
  std::vector<T> dout = as<T>(random_vec(nq, 4)), out(nq), dq(nq), dk(nk), dv(nk);
  std::vector<float> lse(s.batch * s.q_heads * s.q_len);
  const int threads = omp_get_max_threads();
  std::vector<float> ws(kc::flash_attention_workspace_floats(s, threads, std::is_same_v<T, std::uint16_t>));
  std::vector<double> total, fwd;
  for (int r = 0; r <= (dump ? 0 : reps); ++r) {
    const auto t0 = Clock::now();
    if constexpr (std::is_same_v<T, float>) {
      kc::flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), s, ws.data(), threads);
    } else {
      kc::flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), s, ws.data(), threads, path);
    }
    const auto t1 = Clock::now();
    if constexpr (std::is_same_v<T, float>) {
      kc::flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                   dk.data(), dv.data(), s, false, ws.data(), threads);
    } else {
      kc::flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                   dk.data(), dv.data(), s, false, ws.data(), threads, path);
    }
    if (r > 0) {
      total.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  if (dump) {
    std::FILE* f = std::fopen(dump, "wb");
    if (!f) {
      std::fprintf(stderr, "attention_shapes_bench: cannot write %s\n", dump);
      return 1;
    }
    for (const auto* a : {&q, &k, &v, &dout, &out, &dq, &dk, &dv}) write(f, *a);
    write(f, lse);
    std::fclose(f);
    return 0;
  }
  std::printf("shape %lld %lld %lld %lld %lld %s threads %d reps %d ms %.3f fwd_ms %.3f\n",
              static_cast<long long>(s.batch), static_cast<long long>(s.q_heads), static_cast<long long>(s.kv_heads),
              static_cast<long long>(s.q_len), static_cast<long long>(s.head_dim), dtype, threads, reps,
              median(total) * 1e3, median(fwd) * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* dump = nullptr;
  kc::FlashValuePath path = kc::FlashValuePath::kAuto;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc) {
      dump = argv[++i];
    } else if (std::strcmp(argv[i], "--value-path") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "auto" && v != "dots" && v != "gemm") {
        std::fprintf(stderr, "attention_shapes_bench: --value-path %s: use auto, dots or gemm\n", v.c_str());
        return 2;
      }
      path = v == "dots" ? kc::FlashValuePath::kDots : v == "gemm" ? kc::FlashValuePath::kGemm : path;
    } else {
      pos.emplace_back(argv[i]);
    }
  }
  if (pos.size() < 6 || (pos[5] != "f32" && pos[5] != "bf16")) {
    std::fprintf(stderr,
                 "usage: attention_shapes_bench B Hq Hkv T hd f32|bf16 [reps=5] [--dump FILE] "
                 "[--value-path auto|dots|gemm]\n");
    return 2;
  }
  kc::FlashAttentionShape s;
  s.batch = std::atoll(pos[0].c_str());
  s.q_heads = std::atoll(pos[1].c_str());
  s.kv_heads = std::atoll(pos[2].c_str());
  s.q_len = s.kv_len = std::atoll(pos[3].c_str());
  s.head_dim = std::atoll(pos[4].c_str());
  s.ld_q = s.ld_o = s.q_heads * s.head_dim;
  s.ld_k = s.ld_v = s.kv_heads * s.head_dim;
  s.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int reps = pos.size() > 6 ? std::max(1, std::atoi(pos[6].c_str())) : 5;
  if (s.batch < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.q_heads % s.kv_heads != 0 || s.q_len < 1 || s.head_dim < 1) {
    std::fprintf(stderr, "attention_shapes_bench: bad shape (need B, Hq, Hkv, T, hd >= 1 and Hkv dividing Hq)\n");
    return 2;
  }
  return pos[5] == "f32" ? run<float>(s, reps, "f32", dump, path) : run<std::uint16_t>(s, reps, "bf16", dump, path);
}
