// Memory-efficient attention (flash_attention.hpp) against a naive double reference: out, lse, dq, dk, dv on
// awkward shapes (T = 1, 17, 130, 1000; head dims 6 and 64; 6 query heads over 2 key/value heads), with
// query/key position offsets, a sliding window, non-causal attention, rows that see no key, the packed
// q | k | v layout and accumulation into the gradients. Every output starts NaN-poisoned and its norm is
// checked, so a skipped element or an all-zero result fails. Also: the bits do not depend on the thread
// count (with and without the backward's query chunks), and attention_merge of two key chunks' partial results
// equals attention over all keys. bf16 operands against the same reference, within bf16's rounding.
#include "kernels/cpu/flash_attention.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::flash_attention_test {
namespace {

using test::expect_close;
using test::l2_norm;
using test::poisoned;
using test::random_floats;

struct Case {
  const char* name;
  int64_t B, Tq, Tk, Hq, Hkv, hd;
  int64_t q0 = 0, k0 = 0, window = 0;
  bool causal = true;
  bool round_p = false;  // FlashAttentionShape::round_probabilities (the f32 kernel only)
  int64_t key_block = 0;  // FlashAttentionShape::key_block (0: kFlashBlockK)
};

// The results, and the sums of the magnitudes of their terms (out: sum_j p_ij |v_j|; dv: sum_i p_ij |dout_i|;
// dq: sum_j |ds_ij| |k_j|; dk: sum_i |ds_ij| |q_i|), the scale of the error of rounding p and ds; dq and dk also carry
// what out's rounded p move D = dout . out by (sum_d |dout_id| out_mag_id), through ds = p (dp - D) scale.
struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<double> out_mag, dq_mag, dk_mag, dv_mag;
};

bool visible(const Case& c, int64_t i, int64_t j) {
  const int64_t pi = c.q0 + i, pj = c.k0 + j;
  return (!c.causal || pj <= pi) && (c.window <= 0 || pi - pj < c.window);
}

// Unpacked layout: q/out/dout [B, Tq, Hq*hd], k/v [B, Tk, Hkv*hd].
Ref reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
              const std::vector<float>& dout) {
  const int64_t hd = c.hd, group = c.Hq / c.Hkv, ldq = c.Hq * hd, ldk = c.Hkv * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  Ref r;
  r.out.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.out_mag.assign(q.size(), 0.0);
  r.dq_mag.assign(q.size(), 0.0);
  r.dk_mag.assign(k.size(), 0.0);
  r.dv_mag.assign(v.size(), 0.0);
  r.lse.assign(static_cast<size_t>(c.B * c.Hq * c.Tq), -std::numeric_limits<double>::infinity());
  std::vector<double> p(static_cast<size_t>(c.Tk));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < c.Tq; ++i) {
        const float* qi = &q[(b * c.Tq + i) * ldq + h * hd];
        double mx = -1e300;
        bool any = false;
        for (int64_t j = 0; j < c.Tk; ++j) {
          if (!visible(c, i, j)) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += double(qi[d]) * k[(b * c.Tk + j) * ldk + g * hd + d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
          any = true;
        }
        if (!any) continue;  // out 0, lse -inf, no gradient
        double sum = 0.0;
        for (int64_t j = 0; j < c.Tk; ++j) {
          if (visible(c, i, j)) sum += std::exp(p[j] - mx);
        }
        r.lse[(b * c.Hq + h) * c.Tq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < c.Tk; ++j) p[j] = visible(c, i, j) ? std::exp(p[j] - mx) / sum : 0.0;
        double* oi = &r.out[(b * c.Tq + i) * ldq + h * hd];
        double* oi_mag = &r.out_mag[(b * c.Tq + i) * ldq + h * hd];
        for (int64_t j = 0; j < c.Tk; ++j) {
          for (int64_t d = 0; d < hd && p[j] != 0.0; ++d) {
            oi[d] += p[j] * v[(b * c.Tk + j) * ldk + g * hd + d];
            oi_mag[d] += p[j] * std::fabs(v[(b * c.Tk + j) * ldk + g * hd + d]);
          }
        }
        const float* doi = &dout[(b * c.Tq + i) * ldq + h * hd];
        double D = 0.0, D_mag = 0.0;  // D_mag: what out's rounded P move D by, in half ulps
        for (int64_t d = 0; d < hd; ++d) D += double(doi[d]) * oi[d], D_mag += std::fabs(double(doi[d])) * oi_mag[d];
        for (int64_t j = 0; j < c.Tk; ++j) {
          if (p[j] == 0.0) continue;
          double dp = 0.0;
          for (int64_t d = 0; d < hd; ++d) dp += double(doi[d]) * v[(b * c.Tk + j) * ldk + g * hd + d];
          const double ds = p[j] * (dp - D) * scale;
          for (int64_t d = 0; d < hd; ++d) {
            const size_t at_q = (b * c.Tq + i) * ldq + h * hd + d, at_k = (b * c.Tk + j) * ldk + g * hd + d;
            r.dq[at_q] += ds * k[at_k];
            r.dk[at_k] += ds * qi[d];
            r.dv[at_k] += p[j] * doi[d];
            r.dq_mag[at_q] += std::fabs(ds * k[at_k]) + p[j] * D_mag * scale * std::fabs(k[at_k]);
            r.dk_mag[at_k] += std::fabs(ds * qi[d]) + p[j] * D_mag * scale * std::fabs(qi[d]);
            r.dv_mag[at_k] += std::fabs(p[j] * doi[d]);
          }
        }
      }
    }
  }
  return r;
}

// -inf (a row that sees no key) as a finite sentinel, so expect_close can compare it (inf - inf is NaN).
template <typename T>
std::vector<double> no_inf(const std::vector<T>& x) {
  std::vector<double> y(x.begin(), x.end());
  for (auto& e : y) e = e == -std::numeric_limits<double>::infinity() ? -1e30 : e;
  return y;
}

FlashAttentionShape shape_of(const Case& c) {
  FlashAttentionShape s;
  s.batch = c.B;
  s.q_len = c.Tq;
  s.kv_len = c.Tk;
  s.q_heads = c.Hq;
  s.kv_heads = c.Hkv;
  s.head_dim = c.hd;
  s.ld_q = s.ld_o = c.Hq * c.hd;
  s.ld_k = s.ld_v = c.Hkv * c.hd;
  s.q_offset = c.q0;
  s.k_offset = c.k0;
  s.window = c.window;
  s.causal = c.causal;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  s.round_probabilities = c.round_p;
  s.key_block = c.key_block;
  return s;
}

struct KernelRun {
  std::vector<float> out, lse, dq, dk, dv;
};

KernelRun run_kernel(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               const std::vector<float>& dout, int threads) {
  const FlashAttentionShape s = shape_of(c);
  std::vector<float> ws(flash_attention_workspace_floats(s, threads), std::numeric_limits<float>::quiet_NaN());
  KernelRun r;
  r.out = poisoned(q.size());
  r.lse = poisoned(static_cast<size_t>(c.B * c.Hq * c.Tq));
  r.dq = poisoned(q.size());
  r.dk = poisoned(k.size());
  r.dv = poisoned(v.size());
  flash_attention_forward(q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), s, ws.data(), threads);
  flash_attention_backward(q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), dout.data(), r.dq.data(),
                           r.dk.data(), r.dv.data(), s, false, ws.data(), threads);
  return r;
}

class FlashAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionTest, MatchesDoubleReference) {
  const Case c = GetParam();
  const auto q = random_floats(static_cast<size_t>(c.B * c.Tq * c.Hq * c.hd), 1);
  const auto k = random_floats(static_cast<size_t>(c.B * c.Tk * c.Hkv * c.hd), 2);
  const auto v = random_floats(static_cast<size_t>(c.B * c.Tk * c.Hkv * c.hd), 3);
  const auto dout = random_floats(q.size(), 4);
  const Ref want = reference(c, q, k, v, dout);
  const KernelRun got = run_kernel(c, q, k, v, dout, omp_get_max_threads());
  // f32 GEMMs and exp_vec (relative error < 3e-7) against double: errors grow with the row length.
  const double tol = 2e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(c.Tk, 1)));
  expect_close(got.out, want.out, tol, tol, std::string(c.name) + " out");
  expect_close(no_inf(got.lse), no_inf(want.lse), tol, tol, std::string(c.name) + " lse");
  expect_close(got.dq, want.dq, tol, 4 * tol, std::string(c.name) + " dq");
  expect_close(got.dk, want.dk, tol, 4 * tol, std::string(c.name) + " dk");
  expect_close(got.dv, want.dv, tol, 4 * tol, std::string(c.name) + " dv");
  if (l2_norm(want.out) > 0.0) {
    EXPECT_GT(l2_norm(got.out), 0.0) << c.name;
    EXPECT_GT(l2_norm(got.dk), 0.0) << c.name;
  } else {  // no query sees a key: every lse is -inf (out and the gradients were compared as zeros above)
    for (float x : got.lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity()) << c.name;
  }
}

const Case kCases[] = {Case{"T1_hd6", 2, 1, 1, 6, 2, 6}, Case{"T17_hd6", 2, 17, 17, 6, 2, 6},
                      Case{"T130_hd64", 1, 130, 130, 6, 2, 64}, Case{"T130_hd6_mha", 2, 130, 130, 3, 3, 6},
                      Case{"T1000_hd64", 1, 1000, 1000, 2, 1, 64},
                      Case{"window37_T130", 1, 130, 130, 6, 2, 6, 0, 0, 37},
                      Case{"window1_T17", 1, 17, 17, 2, 1, 6, 0, 0, 1},
                      // a later query chunk against earlier keys (ring attention's past step), with a window
                      Case{"q_chunk_after_keys", 2, 17, 130, 6, 2, 6, 130, 0},
                      Case{"q_chunk_window", 1, 130, 200, 6, 2, 64, 150, 20, 90},
                      // the diagonal chunk at an offset, and a chunk entirely in the future (no key visible)
                      Case{"diagonal_offset", 1, 70, 70, 2, 1, 6, 500, 500},
                      Case{"keys_in_future", 1, 17, 30, 2, 1, 6, 0, 100},
                      Case{"non_causal", 2, 17, 33, 6, 2, 6, 0, 0, 0, false},
                      // other key blocks (verify's twin halves them): odd, past a window, a query chunk after its keys
                      Case{"key_block19_T130", 2, 130, 130, 6, 2, 6, 0, 0, 0, true, false, 19},
                      Case{"key_block7_window37", 1, 130, 130, 6, 2, 6, 0, 0, 37, true, false, 7},
                      Case{"key_block16_q_chunk", 2, 17, 130, 6, 2, 64, 130, 0, 0, true, false, 16}};

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(FlashAttention, BitsDoNotDependOnThreadCount) {
  // T 600 over 2 kv groups: the backward splits each group's query rows into chunks (partial dK / dV sums).
  for (const Case& c : {Case{"threads", 2, 200, 200, 6, 2, 64}, Case{"threads_chunks", 1, 600, 600, 6, 2, 6}}) {
    const auto q = random_floats(static_cast<size_t>(c.B * c.Tq * c.Hq * c.hd), 5);
    const auto k = random_floats(static_cast<size_t>(c.B * c.Tk * c.Hkv * c.hd), 6);
    const auto v = random_floats(k.size(), 7);
    const auto dout = random_floats(q.size(), 8);
    const KernelRun one = run_kernel(c, q, k, v, dout, 1);
    for (int threads : {2, 3}) {
      const KernelRun more = run_kernel(c, q, k, v, dout, threads);
      EXPECT_EQ(one.out, more.out) << c.name << " " << threads;
      EXPECT_EQ(one.lse, more.lse) << c.name << " " << threads;
      EXPECT_EQ(one.dq, more.dq) << c.name << " " << threads;
      EXPECT_EQ(one.dk, more.dk) << c.name << " " << threads;
      EXPECT_EQ(one.dv, more.dv) << c.name << " " << threads;
    }
  }
}

// The kv groups run apart (as tensor or all-to-all context parallelism splits the heads) give the bits of one run
// over all of them: one group alone on 2 threads takes a task per query chunk, two groups one task each.
TEST(FlashAttention, BitsDoNotDependOnTheHeadSplit) {
  const Case c{"heads", 1, 600, 600, 6, 2, 6};
  const int64_t hd = c.hd, group = c.Hq / c.Hkv;
  const auto q = random_floats(static_cast<size_t>(c.B * c.Tq * c.Hq * hd), 41);
  const auto k = random_floats(static_cast<size_t>(c.B * c.Tk * c.Hkv * hd), 42);
  const auto v = random_floats(k.size(), 43);
  const auto dout = random_floats(q.size(), 44);
  const KernelRun whole = run_kernel(c, q, k, v, dout, 2);
  KernelRun split{poisoned(q.size()), poisoned(whole.lse.size()), poisoned(q.size()), poisoned(k.size()),
                  poisoned(k.size())};
  for (int64_t g = 0; g < c.Hkv; ++g) {
    FlashAttentionShape s = shape_of(c);
    s.q_heads = group;
    s.kv_heads = 1;
    const int64_t qc = g * group * hd, kc = g * hd;  // the group's first column
    std::vector<float> ws(flash_attention_workspace_floats(s, 2));
    std::vector<float> lse(static_cast<size_t>(group * c.Tq));
    flash_attention_forward(q.data() + qc, k.data() + kc, v.data() + kc, split.out.data() + qc, lse.data(), s,
                            ws.data(), 2);
    flash_attention_backward(q.data() + qc, k.data() + kc, v.data() + kc, split.out.data() + qc, lse.data(),
                             dout.data() + qc, split.dq.data() + qc, split.dk.data() + kc, split.dv.data() + kc, s,
                             false, ws.data(), 2);
    std::copy(lse.begin(), lse.end(), split.lse.begin() + g * group * c.Tq);
  }
  EXPECT_EQ(split.out, whole.out);
  EXPECT_EQ(split.lse, whole.lse);
  EXPECT_EQ(split.dq, whole.dq);
  EXPECT_EQ(split.dk, whole.dk);
  EXPECT_EQ(split.dv, whole.dv);
}

// The packed layout (q | k | v column blocks of one [B, T, (Hq + 2 Hkv) hd] tensor, dq/dk/dv likewise) and
// accumulation give the unpacked results, and accumulate adds onto what is there.
TEST(FlashAttention, PackedLayoutAndAccumulate) {
  // T 600: the backward's query chunks, whose partial sums are added to the gradients once.
  for (const Case& c :
       {Case{"packed", 2, 70, 70, 6, 2, 6, 0, 0, 20}, Case{"packed_chunks", 1, 600, 600, 6, 2, 6, 0, 0, 300}}) {
    const int64_t hd = c.hd, ld = (c.Hq + 2 * c.Hkv) * hd;
    const auto q = random_floats(static_cast<size_t>(c.B * c.Tq * c.Hq * hd), 9);
    const auto k = random_floats(static_cast<size_t>(c.B * c.Tk * c.Hkv * hd), 10);
    const auto v = random_floats(k.size(), 11);
    const auto dout = random_floats(q.size(), 12);
    const KernelRun want = run_kernel(c, q, k, v, dout, 2);
    std::vector<float> qkv(static_cast<size_t>(c.B * c.Tq * ld));
    for (int64_t row = 0; row < c.B * c.Tq; ++row) {
      for (int64_t x = 0; x < c.Hq * hd; ++x) qkv[row * ld + x] = q[row * c.Hq * hd + x];
      for (int64_t x = 0; x < c.Hkv * hd; ++x) {
        qkv[row * ld + c.Hq * hd + x] = k[row * c.Hkv * hd + x];
        qkv[row * ld + (c.Hq + c.Hkv) * hd + x] = v[row * c.Hkv * hd + x];
      }
    }
    FlashAttentionShape s = shape_of(c);
    s.ld_q = s.ld_k = s.ld_v = ld;
    std::vector<float> ws(flash_attention_workspace_floats(s, 2));
    auto out = poisoned(q.size()), lse = poisoned(want.lse.size());
    flash_attention_forward(qkv.data(), qkv.data() + c.Hq * hd, qkv.data() + (c.Hq + c.Hkv) * hd, out.data(),
                            lse.data(), s, ws.data(), 2);
    EXPECT_EQ(out, want.out) << c.name;
    EXPECT_EQ(lse, want.lse) << c.name;
    std::vector<float> dqkv(qkv.size(), 1.0f);  // accumulate onto ones
    flash_attention_backward(qkv.data(), qkv.data() + c.Hq * hd, qkv.data() + (c.Hq + c.Hkv) * hd, out.data(),
                             lse.data(), dout.data(), dqkv.data(), dqkv.data() + c.Hq * hd,
                             dqkv.data() + (c.Hq + c.Hkv) * hd, s, true, ws.data(), 2);
    // dK and dV: each key row's sum is added once; dQ rows take each key block's product in turn (1 + a + b, not
    // 1 + (a + b)), the same bits only under a single key block.
    size_t wrong = 0;
    std::vector<float> dq(q.size()), dq_want(q.size());
    for (int64_t row = 0; row < c.B * c.Tq; ++row) {
      for (int64_t x = 0; x < c.Hq * hd; ++x) {
        dq[row * c.Hq * hd + x] = dqkv[row * ld + x];
        dq_want[row * c.Hq * hd + x] = 1.0f + want.dq[row * c.Hq * hd + x];
      }
      for (int64_t x = 0; x < c.Hkv * hd; ++x) {
        wrong += dqkv[row * ld + c.Hq * hd + x] != 1.0f + want.dk[row * c.Hkv * hd + x];
        wrong += dqkv[row * ld + (c.Hq + c.Hkv) * hd + x] != 1.0f + want.dv[row * c.Hkv * hd + x];
      }
    }
    EXPECT_EQ(wrong, 0u) << c.name;
    if (c.Tk <= kFlashBlockK) {
      EXPECT_EQ(dq, dq_want) << c.name;
    } else {
      expect_close(dq, dq_want, 1e-6, 1e-6, std::string(c.name) + " dq");
    }
  }
}

// Ring attention's step: queries attend keys [0, 60) and [60, 130) separately (offsets), the partials merge
// by log-sum-exp into the full result, and the chunks' backward passes (given the merged out and lse),
// accumulated, give the full gradients.
TEST(FlashAttention, MergedKeyChunksEqualFullAttention) {
  const Case full{"full", 2, 130, 130, 6, 2, 6, 0, 0, 50};
  const int64_t hd = full.hd, split = 60;
  const auto q = random_floats(static_cast<size_t>(full.B * full.Tq * full.Hq * hd), 13);
  const auto k = random_floats(static_cast<size_t>(full.B * full.Tk * full.Hkv * hd), 14);
  const auto v = random_floats(k.size(), 15);
  const auto dout = random_floats(q.size(), 16);
  const KernelRun want = run_kernel(full, q, k, v, dout, 2);
  auto chunk = [&](const std::vector<float>& x, int64_t lo, int64_t hi) {
    std::vector<float> c;
    const int64_t w = full.Hkv * hd;
    for (int64_t b = 0; b < full.B; ++b) {
      c.insert(c.end(), x.begin() + (b * full.Tk + lo) * w, x.begin() + (b * full.Tk + hi) * w);
    }
    return c;
  };
  const Case a{"a", full.B, full.Tq, split, 6, 2, hd, 0, 0, full.window};
  const Case b{"b", full.B, full.Tq, full.Tk - split, 6, 2, hd, 0, split, full.window};
  const auto ka = chunk(k, 0, split), va = chunk(v, 0, split), kb = chunk(k, split, full.Tk), vb = chunk(v, split, full.Tk);
  const KernelRun ra = run_kernel(a, q, ka, va, dout, 2), rb = run_kernel(b, q, kb, vb, dout, 2);
  std::vector<float> out = ra.out, lse = ra.lse;  // merged in place
  attention_merge(out.data(), lse.data(), rb.out.data(), rb.lse.data(), out.data(), lse.data(), full.B, full.Tq,
                  full.Hq, hd);
  expect_close(out, want.out, 1e-6, 1e-5, "merged out");
  expect_close(lse, want.lse, 1e-6, 1e-6, "merged lse");
  // Backward per chunk with the merged statistics, dq accumulated over the chunks.
  std::vector<float> dq(q.size(), 0.0f), dka(ka.size()), dva(va.size()), dkb(kb.size()), dvb(vb.size());
  for (const auto* cs : {&a, &b}) {
    const FlashAttentionShape s = shape_of(*cs);
    std::vector<float> ws(flash_attention_workspace_floats(s, 2));
    const bool first = cs == &a;
    flash_attention_backward(q.data(), (first ? ka : kb).data(), (first ? va : vb).data(), out.data(), lse.data(),
                             dout.data(), dq.data(), (first ? dka : dkb).data(), (first ? dva : dvb).data(), s, true,
                             ws.data(), 2);
  }
  expect_close(dq, want.dq, 1e-5, 1e-4, "chunked dq");
  expect_close(dka, chunk(want.dk, 0, split), 1e-5, 1e-4, "chunk a dk");
  expect_close(dva, chunk(want.dv, 0, split), 1e-5, 1e-4, "chunk a dv");
  expect_close(dvb, chunk(want.dv, split, full.Tk), 1e-5, 1e-4, "chunk b dv");
  expect_close(dkb, chunk(want.dk, split, full.Tk), 1e-5, 1e-4, "chunk b dk");
}

// Elements of got farther from want than an f32 reordering moves them (1e-5 of 1 + |want|), as a fraction of all.
double fraction_beyond_reordering(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  size_t beyond = 0;
  for (size_t i = 0; i < got.size(); ++i) beyond += std::abs(got[i] - want[i]) > 1e-5 * (1.0 + std::abs(want[i]));
  return static_cast<double>(beyond) / static_cast<double>(got.size());
}

// Ring attention's step in bf16 (round_probabilities: the f32 kernel on bf16 values rounds P and dS as the bf16 kernel
// does): key chunks [0, 60) and [60, 130) merged round P as the whole call does, since P's shift is the running
// maximum rounded to a multiple of ln 2, so a chunk's P is the whole call's times a power of two up to f32 rounding;
// the backward's P and dS come from the merged lse either way. Bound: out, lse, dq, dk, dv within an f32 reordering
// except where one tips a P or dS rounding: under 1% of the elements (measured 2026-11-30: 0-0.3%; with P shifted
// by each chunk's own maximum its roundings differ from the whole call's in every row, and most of out's elements
// fail), and those within a bf16 ulp (2^-8) of the tensor's largest value.
TEST(FlashAttention, RoundedProbabilitiesInKeyChunksRoundAsTheWholeCall) {
  Case full{"full", 2, 130, 130, 6, 2, 6, 0, 0, 50};
  full.round_p = true;
  const int64_t hd = full.hd, split = 60;
  const auto q = test::widened(test::random_bf16(static_cast<size_t>(full.B * full.Tq * full.Hq * hd), 23, 2.0f));
  const auto k = test::widened(test::random_bf16(static_cast<size_t>(full.B * full.Tk * full.Hkv * hd), 24, 2.0f));
  const auto v = test::widened(test::random_bf16(k.size(), 25));
  const auto dout = test::widened(test::random_bf16(q.size(), 26));
  const KernelRun want = run_kernel(full, q, k, v, dout, 2);
  auto chunk = [&](const std::vector<float>& x, int64_t lo, int64_t hi) {
    std::vector<float> c;
    const int64_t w = full.Hkv * hd;
    for (int64_t b = 0; b < full.B; ++b) {
      c.insert(c.end(), x.begin() + (b * full.Tk + lo) * w, x.begin() + (b * full.Tk + hi) * w);
    }
    return c;
  };
  Case a{"a", full.B, full.Tq, split, 6, 2, hd, 0, 0, full.window};
  Case b{"b", full.B, full.Tq, full.Tk - split, 6, 2, hd, 0, split, full.window};
  a.round_p = b.round_p = true;
  const auto ka = chunk(k, 0, split), va = chunk(v, 0, split), kb = chunk(k, split, full.Tk), vb = chunk(v, split, full.Tk);
  const KernelRun ra = run_kernel(a, q, ka, va, dout, 2), rb = run_kernel(b, q, kb, vb, dout, 2);
  std::vector<float> out = ra.out, lse = ra.lse;
  attention_merge(out.data(), lse.data(), rb.out.data(), rb.lse.data(), out.data(), lse.data(), full.B, full.Tq,
                  full.Hq, hd);
  std::vector<float> dq(q.size(), 0.0f), dka(ka.size()), dva(va.size()), dkb(kb.size()), dvb(vb.size());
  for (const Case* cs : {&a, &b}) {
    const FlashAttentionShape s = shape_of(*cs);
    std::vector<float> ws(flash_attention_workspace_floats(s, 2));
    const bool first = cs == &a;
    flash_attention_backward(q.data(), (first ? ka : kb).data(), (first ? va : vb).data(), out.data(), lse.data(),
                             dout.data(), dq.data(), (first ? dka : dkb).data(), (first ? dva : dvb).data(), s, true,
                             ws.data(), 2);
  }
  struct Check {
    const char* name;
    const std::vector<float>& got;
    std::vector<float> want;
  };
  const Check checks[] = {{"out", out, want.out},
                          {"lse", lse, want.lse},
                          {"dq", dq, want.dq},
                          {"chunk a dk", dka, chunk(want.dk, 0, split)},
                          {"chunk a dv", dva, chunk(want.dv, 0, split)},
                          {"chunk b dk", dkb, chunk(want.dk, split, full.Tk)},
                          {"chunk b dv", dvb, chunk(want.dv, split, full.Tk)}};
  for (const Check& c : checks) {
    EXPECT_LT(fraction_beyond_reordering(c.got, c.want), 0.01) << c.name;
    double largest = 0;
    for (float x : c.want) largest = std::max(largest, double{std::abs(x)});
    expect_close(c.got, c.want, std::ldexp(largest, -8), 1e-5, std::string("rounded chunks ") + c.name);
  }
  // The control: without the roundings' shared shift the test would see nothing, so the roundings must be there.
  Case plain = full;
  plain.round_p = false;
  EXPECT_GT(fraction_beyond_reordering(run_kernel(plain, q, k, v, dout, 2).out, want.out), 0.5)
      << "round_probabilities changed nothing";
}

// bf16 operands (kernels/cpu/flash_attention_dots.hpp: the score products on the bf16 dot path, P and dS rounded to
// bf16 before the value products, which run on the dot path or the f32 GEMM, f32 statistics and accumulation, outputs
// narrowed once) against the double reference
// on the widened operands: every shape above (GQA groups, head dims 6 and 64, rows that see no key, windows,
// offsets, non-causal, T 1000 with the backward's query chunks), 1 and 2 threads with the same bits, gradients
// written and accumulated onto non-zero bf16 values; and the packed q | k | v layout (row stride larger than a head
// block) with the unpacked bits. Bound: each output within half a bf16 ulp of itself plus half a bf16 ulp of the sum
// of its terms' magnitudes (the rounding of p and ds, at most half an ulp each, the row maximum's p too: its shift is
// a multiple of ln 2, so a row that sees one key no longer gets v and zero gradients exactly) plus the f32 kernel's
// error; lse as the f32 kernel; the gradients also carry the narrowed out's error and out's rounded p through D =
// rowsum(dO * O).
double max_abs(const std::vector<double>& x) {
  double m = 0.0;
  for (double e : x) m = std::max(m, std::fabs(e));
  return m;
}

// |got - want| <= atol + rtol (|want| + mag) element by element.
void expect_within(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag,
                   double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::fabs(got[i] - want[i]) <= atol + rtol * (std::fabs(want[i]) + mag[i]);  // false for NaN
    if (!ok && wrong++ < 5) {
      first += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]) +
               " magnitude " + std::to_string(mag[i]);
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << got.size() << " elements differ" << first;
}

// Each value-product path forced (the dot path runs on the FMA paths' copy of its bits where the CPU lacks the
// instruction), so the test does not depend on the machine.
class FlashAttentionBf16Test : public ::testing::TestWithParam<FlashValuePath> {};

TEST_P(FlashAttentionBf16Test, MatchesDoubleReference) {
  using test::random_bf16;
  using test::widened;
  const FlashValuePath path = GetParam();
  for (const Case& c : kCases) {
    const FlashAttentionShape s = shape_of(c);
    const auto nq = static_cast<size_t>(c.B * c.Tq * c.Hq * c.hd), nk = static_cast<size_t>(c.B * c.Tk * c.Hkv * c.hd);
    const auto q = random_bf16(nq, 21), k = random_bf16(nk, 22), v = random_bf16(nk, 23), dout = random_bf16(nq, 24);
    const auto dq0 = random_bf16(nq, 25), dk0 = random_bf16(nk, 26), dv0 = random_bf16(nk, 27);  // accumulated onto
    const Ref want = reference(c, widened(q), widened(k), widened(v), widened(dout));
    const double tol = 2e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(c.Tk, 1)));
    constexpr double kHalfUlp = 1.0 / 256;  // bf16 rounding, relative (2^-8 covers the f32 error on top)
    std::vector<uint16_t> first[4];  // the 1-thread run's out, dq, dk, dv (written)
    for (int threads : {1, 2}) {
      const std::string at = std::string(c.name) + " bf16 threads " + std::to_string(threads);
      std::vector<float> ws(flash_attention_workspace_floats(s, threads, true), std::nanf(""));
      std::vector<uint16_t> out(nq, 0x7fc1);
      auto lse = poisoned(want.lse.size());
      flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), s, ws.data(), threads, path);
      expect_within(widened(out), want.out, want.out_mag, tol, kHalfUlp, at + " out");
      expect_close(no_inf(lse), no_inf(want.lse), tol, tol, at + " lse");
      for (bool acc : {false, true}) {
        std::vector<uint16_t> dq = acc ? dq0 : std::vector<uint16_t>(nq, 0x7fc1);
        std::vector<uint16_t> dk = acc ? dk0 : std::vector<uint16_t>(nk, 0x7fc1);
        std::vector<uint16_t> dv = acc ? dv0 : std::vector<uint16_t>(nk, 0x7fc1);
        flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                 dk.data(), dv.data(), s, acc, ws.data(), threads, path);
        const std::string what = at + (acc ? " accumulate" : " write");
        const std::vector<uint16_t>* got[] = {&dq, &dk, &dv};
        const std::vector<uint16_t>* start[] = {&dq0, &dk0, &dv0};
        const std::vector<double>* grads[] = {&want.dq, &want.dk, &want.dv};
        const std::vector<double>* mags[] = {&want.dq_mag, &want.dk_mag, &want.dv_mag};
        for (int i = 0; i < 3; ++i) {
          std::vector<double> w = *grads[i];
          if (acc) {
            const auto w0 = widened(*start[i]);
            for (size_t x = 0; x < w.size(); ++x) w[x] += w0[x];
          }
          // The narrowed out moves D by up to half an ulp of |dO . O|: a small absolute error, against the
          // largest gradient.
          expect_within(widened(*got[i]), w, *mags[i], 4 * tol + 4e-3 * max_abs(*grads[i]), kHalfUlp,
                        what + " d" + "qkv"[i]);
        }
        if (!acc && threads == 1) first[0] = out, first[1] = dq, first[2] = dk, first[3] = dv;
        if (!acc && threads == 2) {
          EXPECT_TRUE(test::same_bits(out, first[0])) << at << " out bits";
          EXPECT_TRUE(test::same_bits(dq, first[1])) << at << " dq bits";
          EXPECT_TRUE(test::same_bits(dk, first[2])) << at << " dk bits";
          EXPECT_TRUE(test::same_bits(dv, first[3])) << at << " dv bits";
        }
        if (!acc && l2_norm(want.out) > 0.0) {
          EXPECT_GT(l2_norm(widened(out)), 0.0) << at;
        }
      }
    }
    if (c.Tq != c.Tk) continue;
    // Packed: [B, T, (Hq + 2 Hkv) hd] for q | k | v and for dq | dk | dv (accumulated onto dq0 | dk0 | dv0),
    // against the unpacked run's bits.
    const int64_t hd = c.hd, ld = (c.Hq + 2 * c.Hkv) * hd, wq = c.Hq * hd, wk = c.Hkv * hd;
    auto pack = [&](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<uint16_t>& d) {
      std::vector<uint16_t> x(static_cast<size_t>(c.B * c.Tq * ld));
      for (int64_t row = 0; row < c.B * c.Tq; ++row) {
        std::copy_n(&a[row * wq], wq, &x[row * ld]);
        std::copy_n(&b[row * wk], wk, &x[row * ld + wq]);
        std::copy_n(&d[row * wk], wk, &x[row * ld + wq + wk]);
      }
      return x;
    };
    std::vector<float> ws(flash_attention_workspace_floats(s, 2, true));
    std::vector<uint16_t> out(nq), dq = dq0, dk = dk0, dv = dv0;
    std::vector<float> lse(want.lse.size());
    flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), s, ws.data(), 2, path);
    flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                             dv.data(), s, true, ws.data(), 2, path);
    FlashAttentionShape packed = s;
    packed.ld_q = packed.ld_k = packed.ld_v = ld;
    const auto qkv = pack(q, k, v);
    auto dqkv = pack(dq0, dk0, dv0);
    std::vector<float> ws_packed(flash_attention_workspace_floats(packed, 2, true));
    flash_attention_backward(qkv.data(), qkv.data() + wq, qkv.data() + wq + wk, out.data(), lse.data(), dout.data(),
                             dqkv.data(), dqkv.data() + wq, dqkv.data() + wq + wk, packed, true, ws_packed.data(), 2,
                             path);
    EXPECT_TRUE(test::same_bits(dqkv, pack(dq, dk, dv))) << c.name << " packed accumulate";
  }
}

// bf16 on each path: the kv groups run apart give the bits of one run over all of them (one group alone on 2 threads
// takes a task per query chunk, two groups one task each).
TEST_P(FlashAttentionBf16Test, BitsDoNotDependOnTheHeadSplit) {
  const FlashValuePath path = GetParam();
  const Case c{"heads", 1, 600, 600, 6, 2, 64};
  const int64_t hd = c.hd, group = c.Hq / c.Hkv;
  const auto nq = static_cast<size_t>(c.B * c.Tq * c.Hq * hd), nk = static_cast<size_t>(c.B * c.Tk * c.Hkv * hd);
  const auto q = test::random_bf16(nq, 41), k = test::random_bf16(nk, 42), v = test::random_bf16(nk, 43);
  const auto dout = test::random_bf16(nq, 44);
  const FlashAttentionShape whole_shape = shape_of(c);
  std::vector<float> ws(flash_attention_workspace_floats(whole_shape, 2, true));
  std::vector<uint16_t> out(nq), dq(nq), dk(nk), dv(nk);
  std::vector<float> lse(static_cast<size_t>(c.Hq * c.Tq));
  flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), whole_shape, ws.data(), 2, path);
  flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                           dv.data(), whole_shape, false, ws.data(), 2, path);
  std::vector<uint16_t> out_s(nq, 0x7fc1), dq_s(nq, 0x7fc1), dk_s(nk, 0x7fc1), dv_s(nk, 0x7fc1);
  std::vector<float> lse_s(lse.size());
  for (int64_t g = 0; g < c.Hkv; ++g) {
    FlashAttentionShape s = whole_shape;
    s.q_heads = group;
    s.kv_heads = 1;
    const int64_t qc = g * group * hd, kc = g * hd;
    std::vector<float> ws_g(flash_attention_workspace_floats(s, 2, true));
    flash_attention_forward(q.data() + qc, k.data() + kc, v.data() + kc, out_s.data() + qc,
                            lse_s.data() + g * group * c.Tq, s, ws_g.data(), 2, path);
    flash_attention_backward(q.data() + qc, k.data() + kc, v.data() + kc, out_s.data() + qc,
                             lse_s.data() + g * group * c.Tq, dout.data() + qc, dq_s.data() + qc, dk_s.data() + kc,
                             dv_s.data() + kc, s, false, ws_g.data(), 2, path);
  }
  EXPECT_TRUE(test::same_bits(out_s, out));
  EXPECT_EQ(lse_s, lse);
  EXPECT_TRUE(test::same_bits(dq_s, dq));
  EXPECT_TRUE(test::same_bits(dk_s, dk));
  EXPECT_TRUE(test::same_bits(dv_s, dv));
}

INSTANTIATE_TEST_SUITE_P(ValuePaths, FlashAttentionBf16Test,
                         ::testing::Values(FlashValuePath::kDots, FlashValuePath::kGemm),
                         [](const ::testing::TestParamInfo<FlashValuePath>& info) {
                           return std::string(info.param == FlashValuePath::kDots ? "Dots" : "Gemm");
                         });

TEST(FlashAttention, MergeWithAnEmptySide) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out_a = {1, 2, 3, 4}, lse_a = {-inf, 0.5f}, out_b = {5, 6, 7, 8}, lse_b = {-inf, -inf};
  std::vector<float> out(4, std::nanf("")), lse(2, std::nanf(""));
  // batch 1, len 2, heads 1, head_dim 2: row 0 has no key on either side, row 1 only on side a.
  attention_merge(out_a.data(), lse_a.data(), out_b.data(), lse_b.data(), out.data(), lse.data(), 1, 2, 1, 2);
  EXPECT_EQ(out, (std::vector<float>{0, 0, 3, 4}));
  EXPECT_EQ(lse[0], -inf);
  EXPECT_FLOAT_EQ(lse[1], 0.5f);
}

}  // namespace
}  // namespace cleave::kernels::cpu::flash_attention_test
