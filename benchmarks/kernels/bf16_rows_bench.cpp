// The bf16 kernels that convert a row at a time inside their loops (issue 39) against the whole-tensor path they
// replaced (widen every bf16 input into f32 scratch, run the f32 kernel, narrow every output: what
// kernels/ops/cpu_f32_view.hpp does; the scratch allocated once, as the allocator's cache hands it back): RoPE's
// packing forward and backward on the Llama example's shape, the bias gradient and LayerNorm's weight gradient on
// the small peer GPT's MLP and model widths, RMSNorm's weight gradient on the Llama example's; memory-efficient
// attention forward and backward (a block at a time) on the small peer GPT's and the Llama example's packed qkv, and
// the fused cross-entropy forward + backward (a row at a time) at vocabulary 256 (the peer models) and 50,304
// (GPT-2's, padded).
//
// RoPE and the cross-entropy borrow a KernelScratch kept across calls (each path its own), as a run's CpuResources
// lends it (kernels/cpu/kernel_scratch.hpp).
//
// What it asserts before timing: both paths give the same bits (else it exits 1 without timing). What it reports:
// per kernel and thread count, the median of 15 timed calls (after 3 warm-up calls) of each path, interleaved call
// by call, in microseconds, and old / new. Run on a shared machine, read the ratio, not the absolute figure.
//
//   build/bin/bf16_rows_bench            (threads 1 and 2)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"

namespace {

namespace kc = cleave::kernels::cpu;
using Bits = std::vector<std::uint16_t>;

Bits random_bf16(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> f(n);
  for (auto& x : f) x = dist(gen);
  Bits out(n);
  kc::cast_f32_to_bf16(f.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

// f32 scratch allocated once per kernel (slot i), reused by every call of its whole-tensor path.
struct Scratch {
  std::vector<std::vector<float>> slots = std::vector<std::vector<float>>(8);
  float* widen(int i, const Bits& x) {
    auto& buf = slots[static_cast<size_t>(i)];
    buf.resize(x.size());
    kc::cast_bf16_to_f32(x.data(), buf.data(), static_cast<int64_t>(x.size()));
    return buf.data();
  }
  std::vector<float>& out(int i, size_t n) {
    slots[static_cast<size_t>(i)].resize(n);
    return slots[static_cast<size_t>(i)];
  }
};

void narrow(const std::vector<float>& x, Bits& out) {
  kc::cast_f32_to_bf16(x.data(), out.data(), static_cast<int64_t>(x.size()));
}

struct Kernel {
  std::string name;
  std::function<std::vector<std::uint8_t>()> whole, rows;  // each returns its outputs' bytes (for the bit check)
};

template <class T>
void append(std::vector<std::uint8_t>& bytes, const std::vector<T>& v) {
  const size_t at = bytes.size();
  bytes.resize(at + v.size() * sizeof(T));
  std::memcpy(bytes.data() + at, v.data(), v.size() * sizeof(T));
}

std::vector<Kernel> kernels() {
  std::vector<Kernel> ks;
  // Llama example: batch 8 (one micro-batch), T 64, 4 query heads, 2 kv heads, hd 32, grouped packing.
  kc::RopeShape s;
  s.batch = 8, s.seq = 64, s.q_heads = 4, s.kv_heads = 2, s.head_dim = 32, s.packed_kv_heads = 2;
  const int64_t rows = s.batch * s.seq, cq = 4 * 32, ckv = 2 * 32, width = cq + 2 * 2 * 32;
  const Bits q = random_bf16(static_cast<size_t>(rows * cq), 1), k = random_bf16(static_cast<size_t>(rows * ckv), 2),
             v = random_bf16(static_cast<size_t>(rows * ckv), 3), d = random_bf16(static_cast<size_t>(rows * width), 4);
  ks.push_back({"rope_pack_qkv [512 x 128 | 64 | 64]",
                [=, sc = std::make_shared<Scratch>(), run = std::make_shared<kc::KernelScratch>()] {
                  Bits out(static_cast<size_t>(rows * width));
                  std::vector<float>& o = sc->out(3, out.size());
                  kc::rope_pack_qkv(sc->widen(0, q), sc->widen(1, k), sc->widen(2, v), o.data(), s, run.get());
                  narrow(o, out);
                  std::vector<std::uint8_t> b;
                  append(b, out);
                  return b;
                },
                [=, run = std::make_shared<kc::KernelScratch>()] {
                  Bits out(static_cast<size_t>(rows * width));
                  kc::rope_pack_qkv(q.data(), k.data(), v.data(), out.data(), s, run.get());
                  std::vector<std::uint8_t> b;
                  append(b, out);
                  return b;
                }});
  ks.push_back({"rope_pack_qkv_backward [512 x 256]",
                [=, sc = std::make_shared<Scratch>(), run = std::make_shared<kc::KernelScratch>()] {
                  std::vector<float>&dq = sc->out(1, q.size()), &dk = sc->out(2, k.size()), &dv = sc->out(3, v.size());
                  kc::rope_pack_qkv_backward(sc->widen(0, d), dq.data(), dk.data(), dv.data(), s, run.get());
                  Bits bq(q.size()), bk(k.size()), bv(v.size());
                  narrow(dq, bq), narrow(dk, bk), narrow(dv, bv);
                  std::vector<std::uint8_t> b;
                  append(b, bq), append(b, bk), append(b, bv);
                  return b;
                },
                [=, run = std::make_shared<kc::KernelScratch>()] {
                  Bits bq(q.size()), bk(k.size()), bv(v.size());
                  kc::rope_pack_qkv_backward(d.data(), bq.data(), bk.data(), bv.data(), s, run.get());
                  std::vector<std::uint8_t> b;
                  append(b, bq), append(b, bk), append(b, bv);
                  return b;
                }});
  for (int64_t cols : {1024, 256}) {  // the small GPT's fc and model widths, 1,024 tokens
    const int64_t n = 1024;
    const Bits dy = random_bf16(static_cast<size_t>(n * cols), 5), x = random_bf16(static_cast<size_t>(n * cols), 6);
    std::vector<float> mean(static_cast<size_t>(n), 0.1f), rstd(static_cast<size_t>(n), 1.3f);
    const std::string shape = " [1024 x " + std::to_string(cols) + "]";
    ks.push_back({"bias_backward" + shape,
                  [=, sc = std::make_shared<Scratch>()] {
                    std::vector<float> g(static_cast<size_t>(cols), 0.0f);
                    kc::bias_backward(sc->widen(0, dy), g.data(), n, cols);
                    std::vector<std::uint8_t> b;
                    append(b, g);
                    return b;
                  },
                  [=] {
                    std::vector<float> g(static_cast<size_t>(cols), 0.0f);
                    kc::bias_backward(dy.data(), g.data(), n, cols);
                    std::vector<std::uint8_t> b;
                    append(b, g);
                    return b;
                  }});
    ks.push_back({"layernorm_backward_weight" + shape,
                  [=, sc = std::make_shared<Scratch>()] {
                    std::vector<float> g(static_cast<size_t>(cols), 0.0f), h(g);
                    kc::layernorm_backward_weight(sc->widen(0, dy), sc->widen(1, x), mean.data(), rstd.data(),
                                                  g.data(), h.data(), n, cols);
                    std::vector<std::uint8_t> b;
                    append(b, g), append(b, h);
                    return b;
                  },
                  [=] {
                    std::vector<float> g(static_cast<size_t>(cols), 0.0f), h(g);
                    kc::layernorm_backward_weight(dy.data(), x.data(), mean.data(), rstd.data(), g.data(), h.data(),
                                                  n, cols);
                    std::vector<std::uint8_t> b;
                    append(b, g), append(b, h);
                    return b;
                  }});
  }
  {  // the Llama example's RMSNorm: 512 tokens x 128
    const int64_t n = 512, cols = 128;
    const Bits dy = random_bf16(static_cast<size_t>(n * cols), 7), x = random_bf16(static_cast<size_t>(n * cols), 8);
    std::vector<float> rstd(static_cast<size_t>(n), 1.3f);
    ks.push_back({"rmsnorm_backward_weight [512 x 128]",
                  [=, sc = std::make_shared<Scratch>()] {
                    std::vector<float> g(static_cast<size_t>(cols), 0.0f);
                    kc::rmsnorm_backward_weight(sc->widen(0, dy), sc->widen(1, x), rstd.data(), g.data(), n, cols);
                    std::vector<std::uint8_t> b;
                    append(b, g);
                    return b;
                  },
                  [=] {
                    std::vector<float> g(static_cast<size_t>(cols), 0.0f);
                    kc::rmsnorm_backward_weight(dy.data(), x.data(), rstd.data(), g.data(), n, cols);
                    std::vector<std::uint8_t> b;
                    append(b, g);
                    return b;
                  }});
  }
  // Attention on a packed [B, T, (Hq + 2 Hkv) hd] qkv: the small peer GPT (16 x 64, 8 heads of 32) and the Llama
  // example's micro-batch (8 x 64, 4 query heads over 2 kv heads of 32). Forward, then backward from its out.
  for (auto [label, B, Hq, Hkv] : {std::tuple<const char*, int64_t, int64_t, int64_t>{"small GPT", 16, 8, 8},
                                   {"Llama", 8, 4, 2}}) {
    kc::FlashAttentionShape a;
    a.batch = B, a.q_len = a.kv_len = 64, a.q_heads = Hq, a.kv_heads = Hkv, a.head_dim = 32;
    a.ld_q = a.ld_k = a.ld_v = (Hq + 2 * Hkv) * 32;
    a.ld_o = Hq * 32;
    a.scale = 1.0f / std::sqrt(32.0f);
    const int64_t tokens = B * 64;
    const Bits qkv = random_bf16(static_cast<size_t>(tokens * a.ld_q), 9);
    const Bits dout = random_bf16(static_cast<size_t>(tokens * a.ld_o), 10);
    const int64_t kcol = Hq * 32, vcol = (Hq + Hkv) * 32;
    const std::string name = std::string("attention fwd + bwd (") + label + ")";
    ks.push_back({name,
                  [=, sc = std::make_shared<Scratch>()] {
                    const int threads = omp_get_max_threads();
                    const float* x = sc->widen(0, qkv);
                    std::vector<float>& o = sc->out(1, dout.size());
                    std::vector<float>& lse = sc->out(2, static_cast<size_t>(B * Hq * 64));
                    std::vector<float>& ws = sc->out(3, kc::flash_attention_workspace_floats(a, threads));
                    kc::flash_attention_forward(x, x + kcol, x + vcol, o.data(), lse.data(), a, ws.data(), threads);
                    Bits out(dout.size());
                    narrow(o, out);
                    const float* o32 = sc->widen(4, out);
                    const float* d32 = sc->widen(5, dout);
                    std::vector<float>& dx = sc->out(6, qkv.size());
                    kc::flash_attention_backward(x, x + kcol, x + vcol, o32, lse.data(), d32, dx.data(),
                                                 dx.data() + kcol, dx.data() + vcol, a, false, ws.data(), threads);
                    Bits dqkv(qkv.size());
                    narrow(dx, dqkv);
                    std::vector<std::uint8_t> b;
                    append(b, out), append(b, dqkv);
                    return b;
                  },
                  [=, ws = std::make_shared<std::vector<float>>()] {
                    const int threads = omp_get_max_threads();
                    ws->resize(kc::flash_attention_workspace_floats(a, threads, true));
                    Bits out(dout.size()), dqkv(qkv.size());
                    std::vector<float> lse(static_cast<size_t>(B * Hq * 64));
                    const std::uint16_t* x = qkv.data();
                    kc::flash_attention_forward(x, x + kcol, x + vcol, out.data(), lse.data(), a, ws->data(), threads);
                    kc::flash_attention_backward(x, x + kcol, x + vcol, out.data(), lse.data(), dout.data(),
                                                 dqkv.data(), dqkv.data() + kcol, dqkv.data() + vcol, a, false,
                                                 ws->data(), threads);
                    std::vector<std::uint8_t> b;
                    append(b, out), append(b, dqkv);
                    return b;
                  }});
  }
  // Cross-entropy forward + backward (gradient in place of the logits, as the loss layer does).
  for (int64_t classes : {int64_t{256}, int64_t{50304}}) {
    const int64_t n = classes == 256 ? 1024 : 256;
    const Bits logits = random_bf16(static_cast<size_t>(n * classes), 11);
    std::vector<std::int32_t> targets(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) targets[static_cast<size_t>(r)] = static_cast<std::int32_t>((r * 7919) % classes);
    const std::string name = "cross-entropy fwd + bwd [" + std::to_string(n) + " x " + std::to_string(classes) + "]";
    ks.push_back({name,
                  [=, sc = std::make_shared<Scratch>(), run = std::make_shared<kc::KernelScratch>()] {
                    float* x = sc->widen(0, logits);
                    std::vector<float>& lse = sc->out(1, static_cast<size_t>(n));
                    const double loss =
                        kc::softmax_cross_entropy_forward(x, targets.data(), lse.data(), n, classes, run.get());
                    kc::softmax_cross_entropy_backward(x, targets.data(), lse.data(), 0.5f, x, n, classes, run.get());
                    Bits g(logits.size());
                    kc::cast_f32_to_bf16(x, g.data(), static_cast<int64_t>(g.size()));
                    std::vector<std::uint8_t> b;
                    append(b, std::vector<double>{loss}), append(b, g);
                    return b;
                  },
                  [=, run = std::make_shared<kc::KernelScratch>()] {
                    Bits g = logits;
                    std::vector<float> lse(static_cast<size_t>(n));
                    const double loss =
                        kc::softmax_cross_entropy_forward(g.data(), targets.data(), lse.data(), n, classes, run.get());
                    kc::softmax_cross_entropy_backward_shard(g.data(), targets.data(), 0, lse.data(), 0.5f, g.data(),
                                                             n, classes, classes, -1, run.get());
                    std::vector<std::uint8_t> b;
                    append(b, std::vector<double>{loss}), append(b, g);
                    return b;
                  }});
  }
  return ks;
}

double micros(const std::function<std::vector<std::uint8_t>()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = f();
  const auto t1 = std::chrono::steady_clock::now();
  if (out.empty()) std::abort();
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const auto ks = kernels();
  for (const Kernel& k : ks) {
    if (k.whole() != k.rows()) {
      std::fprintf(stderr, "bf16_rows_bench: %s: the row path differs from the whole-tensor path\n", k.name.c_str());
      return 1;
    }
  }
  std::printf("| kernel | threads | whole-tensor casts (us) | rows (us) | whole / rows |\n| --- | ---: | ---: | ---: | ---: |\n");
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const Kernel& k : ks) {
      std::vector<double> whole, rows;
      for (int i = 0; i < 18; ++i) {  // interleaved; the first 3 of each are warm-up
        const double w = micros(k.whole), r = micros(k.rows);
        if (i >= 3) whole.push_back(w), rows.push_back(r);
      }
      const double mw = median(whole), mr = median(rows);
      std::printf("| %s | %d | %.1f | %.1f | %.2f |\n", k.name.c_str(), threads, mw, mr, mw / mr);
    }
  }
  return 0;
}
