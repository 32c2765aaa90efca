// RoPE + grouped-query packing against a double reference (rotation in double, the angle computed in f32 the
// way transformers does, written out here independently) on awkward shapes: hd = 6 and 2, Hq = 6 with
// Hkv = 2, Hkv = Hq, one kv head, position offsets > 0, a size that goes parallel. Backward is checked
// against the transposed reference and by the adjoint identity <pack(q,k,v), g> = <q,dq> + <k,dk> + <v,dv>.
// The bf16 kernels give the bits of the f32 kernel between whole-tensor casts.
#include "kernels/cpu/rope.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::rope_test {
namespace {

struct Case {
  int64_t b, t, hq, hkv, hd, offset;
  float theta;
};

// transformers: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)); freqs = inv_freq * position (f32).
float reference_angle(int64_t pos, int64_t i, int64_t hd, float theta) {
  const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
  return static_cast<float>(pos) * inv_freq;
}

RopeShape shape_of(const Case& c) {
  RopeShape s;
  s.batch = c.b;
  s.seq = c.t;
  s.q_heads = c.hq;
  s.kv_heads = c.hkv;
  s.head_dim = c.hd;
  s.theta = c.theta;
  s.position_offset = c.offset;
  return s;
}

// One head of hd values at position pos rotated by +angle (sign +1) or -angle (sign -1), in double.
void rotate_ref(const double* x, double* out, int64_t pos, const Case& c, double sign) {
  const int64_t half = c.hd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = reference_angle(pos, i, c.hd, c.theta);
    const double cs = std::cos(a), sn = sign * std::sin(a);
    out[i] = x[i] * cs - x[i + half] * sn;
    out[i + half] = x[i + half] * cs + x[i] * sn;
  }
}

const Case kCases[] = {
    {2, 5, 6, 2, 6, 0, 10000.0f},     // grouped query, hd 6
    {1, 3, 4, 4, 8, 7, 10000.0f},     // Hkv = Hq, offset
    {3, 7, 3, 1, 2, 1000, 500000.0f},  // one kv head, hd 2, large offset and theta
    {4, 64, 8, 2, 32, 3, 10000.0f},   // parallel
    {1, 1, 2, 1, 64, 0, 10000.0f},    // one row, hd 64
    {1, 17, 4, 2, 96, 5, 10000.0f},   // 17 rows, hd 96 (48 pairs: a tail past 16 and 32 lanes)
    {2, 65, 3, 3, 6, 2, 10000.0f},    // 130 rows, hd 6
    {2, 65, 4, 1, 96, 0, 500000.0f},  // 130 rows, hd 96, one kv head
};

TEST(KernelRope, ForwardRotatesAndPacksGroupedHeads) {
  for (const Case& c : kCases) {
    const int64_t cq = c.hq * c.hd, ckv = c.hkv * c.hd, rows = c.b * c.t, g = c.hq / c.hkv;
    const auto q = test::random_floats(static_cast<size_t>(rows * cq), 1);
    const auto k = test::random_floats(static_cast<size_t>(rows * ckv), 2);
    const auto v = test::random_floats(static_cast<size_t>(rows * ckv), 3);
    auto qkv = test::poisoned(static_cast<size_t>(rows * 3 * cq));
    rope_pack_qkv(q.data(), k.data(), v.data(), qkv.data(), shape_of(c));
    std::vector<double> want(qkv.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = c.offset + r % c.t;
      for (int64_t h = 0; h < c.hq; ++h) {
        std::vector<double> qh(q.begin() + r * cq + h * c.hd, q.begin() + r * cq + (h + 1) * c.hd);
        std::vector<double> kh(k.begin() + r * ckv + (h / g) * c.hd, k.begin() + r * ckv + (h / g + 1) * c.hd);
        double* out = want.data() + r * 3 * cq;
        rotate_ref(qh.data(), out + h * c.hd, pos, c, 1.0);
        rotate_ref(kh.data(), out + cq + h * c.hd, pos, c, 1.0);
        for (int64_t j = 0; j < c.hd; ++j) out[2 * cq + h * c.hd + j] = v[r * ckv + (h / g) * c.hd + j];
      }
    }
    test::expect_close(qkv, want, 2e-6, 1e-5, "rope_pack_qkv hq " + std::to_string(c.hq) + " hkv " +
                                                   std::to_string(c.hkv) + " hd " + std::to_string(c.hd));
    EXPECT_GT(test::l2_norm(qkv), 0.0);
  }
}

TEST(KernelRope, BackwardIsTheTransposeAndSumsSharedHeads) {
  for (const Case& c : kCases) {
    const int64_t cq = c.hq * c.hd, ckv = c.hkv * c.hd, rows = c.b * c.t, g = c.hq / c.hkv;
    const auto dqkv = test::random_floats(static_cast<size_t>(rows * 3 * cq), 4);
    auto dq = test::poisoned(static_cast<size_t>(rows * cq));
    auto dk = test::poisoned(static_cast<size_t>(rows * ckv));
    auto dv = test::poisoned(static_cast<size_t>(rows * ckv));
    rope_pack_qkv_backward(dqkv.data(), dq.data(), dk.data(), dv.data(), shape_of(c));
    std::vector<double> want_q(dq.size()), want_k(dk.size(), 0.0), want_v(dv.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = c.offset + r % c.t;
      const float* in = dqkv.data() + r * 3 * cq;
      for (int64_t h = 0; h < c.hq; ++h) {
        std::vector<double> dqh(in + h * c.hd, in + (h + 1) * c.hd), dkh(in + cq + h * c.hd, in + cq + (h + 1) * c.hd);
        rotate_ref(dqh.data(), want_q.data() + r * cq + h * c.hd, pos, c, -1.0);
        std::vector<double> unrot(static_cast<size_t>(c.hd));
        rotate_ref(dkh.data(), unrot.data(), pos, c, -1.0);
        for (int64_t j = 0; j < c.hd; ++j) {
          want_k[r * ckv + (h / g) * c.hd + j] += unrot[j];
          want_v[r * ckv + (h / g) * c.hd + j] += in[2 * cq + h * c.hd + j];
        }
      }
    }
    test::expect_close(dq, want_q, 2e-6, 1e-5, "rope dq");
    test::expect_close(dk, want_k, 1e-5, 1e-5, "rope dk");
    test::expect_close(dv, want_v, 1e-5, 1e-5, "rope dv");
    EXPECT_GT(test::l2_norm(dk), 0.0);

    // Adjoint identity on fresh inputs: the backward is the forward's transpose.
    const auto q = test::random_floats(dq.size(), 5), k = test::random_floats(dk.size(), 6),
               v = test::random_floats(dv.size(), 7);
    std::vector<float> qkv(dqkv.size());
    rope_pack_qkv(q.data(), k.data(), v.data(), qkv.data(), shape_of(c));
    double lhs = 0.0, rhs = 0.0;
    for (size_t i = 0; i < qkv.size(); ++i) lhs += double(qkv[i]) * dqkv[i];
    for (size_t i = 0; i < q.size(); ++i) rhs += double(q[i]) * dq[i];
    for (size_t i = 0; i < k.size(); ++i) rhs += double(k[i]) * dk[i] + double(v[i]) * dv[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1.0 + std::fabs(lhs)));
  }
}

// The grouped layout (P = Hkv: what LlamaAttention packs for the grouped-query attention op) holds each kv
// head once: its q block and key/value head j are bit for bit the repeated layout's q block and copy j·g
// (the same rotation of the same inputs), and its backward equals the repeated backward fed a dqkv whose
// other copies are zero (a sum with exact zeros); the adjoint identity holds on the grouped form too.
TEST(KernelRope, GroupedPackingKeepsEachKvHeadOnce) {
  for (const Case& c : kCases) {
    const int64_t cq = c.hq * c.hd, ckv = c.hkv * c.hd, rows = c.b * c.t, g = c.hq / c.hkv;
    const int64_t wide = cq + 2 * cq, narrow = cq + 2 * ckv;
    RopeShape grouped = shape_of(c);
    grouped.packed_kv_heads = c.hkv;
    const auto q = test::random_floats(static_cast<size_t>(rows * cq), 11);
    const auto k = test::random_floats(static_cast<size_t>(rows * ckv), 12);
    const auto v = test::random_floats(static_cast<size_t>(rows * ckv), 13);
    auto repeated = test::poisoned(static_cast<size_t>(rows * wide));
    auto packed = test::poisoned(static_cast<size_t>(rows * narrow));
    rope_pack_qkv(q.data(), k.data(), v.data(), repeated.data(), shape_of(c));
    rope_pack_qkv(q.data(), k.data(), v.data(), packed.data(), grouped);
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = repeated.data() + r * wide;
      const float* b = packed.data() + r * narrow;
      for (int64_t x = 0; x < cq; ++x) wrong += a[x] != b[x];
      for (int64_t j = 0; j < c.hkv; ++j) {
        for (int64_t x = 0; x < c.hd; ++x) {
          wrong += a[cq + j * g * c.hd + x] != b[cq + j * c.hd + x];
          wrong += a[2 * cq + j * g * c.hd + x] != b[cq + ckv + j * c.hd + x];
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "hq " << c.hq << " hkv " << c.hkv;
    EXPECT_GT(test::l2_norm(packed), 0.0);

    const auto dpacked = test::random_floats(static_cast<size_t>(rows * narrow), 14);
    std::vector<float> drepeated(static_cast<size_t>(rows * wide), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = dpacked.data() + r * narrow;
      float* out = drepeated.data() + r * wide;
      std::copy_n(in, cq, out);
      for (int64_t j = 0; j < c.hkv; ++j) {
        std::copy_n(in + cq + j * c.hd, c.hd, out + cq + j * g * c.hd);
        std::copy_n(in + cq + ckv + j * c.hd, c.hd, out + 2 * cq + j * g * c.hd);
      }
    }
    std::vector<float> dq(static_cast<size_t>(rows * cq)), dk(static_cast<size_t>(rows * ckv)), dv(dk.size());
    std::vector<float> eq(dq.size()), ek(dk.size()), ev(dv.size());
    rope_pack_qkv_backward(dpacked.data(), dq.data(), dk.data(), dv.data(), grouped);
    rope_pack_qkv_backward(drepeated.data(), eq.data(), ek.data(), ev.data(), shape_of(c));
    EXPECT_EQ(dq, eq);
    EXPECT_EQ(dk, ek);
    EXPECT_EQ(dv, ev);
    EXPECT_GT(test::l2_norm(dk), 0.0);
    double lhs = 0.0, rhs = 0.0;
    for (size_t i = 0; i < packed.size(); ++i) lhs += double(packed[i]) * dpacked[i];
    for (size_t i = 0; i < q.size(); ++i) rhs += double(q[i]) * dq[i];
    for (size_t i = 0; i < k.size(); ++i) rhs += double(k[i]) * dk[i] + double(v[i]) * dv[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1.0 + std::fabs(lhs)));
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every vector path this CPU has (AVX2, AVX-512) gives the baseline path's bits, forward and backward, repeated
// and grouped layouts (hd 2, 6, 8: all tail; 32, 64, 96: full vectors and tails); and 1 and 2 threads agree.
TEST(KernelRope, EveryIsaPathAndThreadCountGivesTheSameBits) {
  double norm = 0.0;
  const int saved = omp_get_max_threads();
  for (const Case& c : kCases) {
    for (bool grouped : {false, true}) {
      RopeShape s = shape_of(c);
      if (grouped) s.packed_kv_heads = c.hkv;
      const int64_t P = grouped ? c.hkv : c.hq;
      const int64_t cq = c.hq * c.hd, ckv = c.hkv * c.hd, rows = c.b * c.t, width = cq + 2 * P * c.hd;
      const auto q = test::random_floats(static_cast<size_t>(rows * cq), 41, 2.0f);
      const auto k = test::random_floats(static_cast<size_t>(rows * ckv), 42);
      const auto v = test::random_floats(static_cast<size_t>(rows * ckv), 43);
      const auto dqkv = test::random_floats(static_cast<size_t>(rows * width), 44);
      auto run = [&](VectorIsa isa) {
        std::vector<std::vector<float>> out{test::poisoned(static_cast<size_t>(rows * width)),
                                            test::poisoned(q.size()), test::poisoned(k.size()),
                                            test::poisoned(v.size())};
        rope_pack_qkv_isa(isa, q.data(), k.data(), v.data(), out[0].data(), s);
        rope_pack_qkv_backward_isa(isa, dqkv.data(), out[1].data(), out[2].data(), out[3].data(), s);
        return out;
      };
      const auto base = run(VectorIsa::kBaseline);
      norm += test::l2_norm(base[0]) + test::l2_norm(base[2]);
      const std::string what = "hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) + " hd " +
                               std::to_string(c.hd) + " rows " + std::to_string(rows) + (grouped ? " grouped" : "");
      test::for_each_isa_path(test::kIsaPathsPastBaseline, [&](VectorIsa isa) {
        const auto got = run(isa);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(same_bits(got[i], base[i])) << "output " << i << ", " << test::isa_label(isa) << ", " << what;
        }
      });
      omp_set_num_threads(1);
      const auto one = run(best_vector_isa());
      omp_set_num_threads(2);
      const auto two = run(best_vector_isa());
      omp_set_num_threads(saved);
      for (size_t i = 0; i < one.size(); ++i) {
        EXPECT_TRUE(same_bits(one[i], two[i])) << "output " << i << ", 1 against 2 threads, " << what;
      }
    }
  }
  EXPECT_GT(norm, 0.0);
}

using test::narrowed;
using test::random_bf16;
using test::widened;

// The bf16 kernels (rows converted inside the loop) against the whole-tensor path they replace: widen q, k, v (or
// dqkv), run the f32 kernel (baseline path), narrow every output once. Bit for bit on every vector path, at 1 and
// 2 threads, repeated and grouped layouts, every shape of kCases (hd 2 and 6: vectors never full; 96: tails).
TEST(KernelRope, Bf16RowsGiveTheWidenedF32Bits) {
  double norm = 0.0;
  int compared = 0;
  for (const Case& c : kCases) {
    for (bool grouped : {false, true}) {
      RopeShape s = shape_of(c);
      if (grouped) s.packed_kv_heads = c.hkv;
      const int64_t P = grouped ? c.hkv : c.hq;
      const int64_t cq = c.hq * c.hd, ckv = c.hkv * c.hd, rows = c.b * c.t, width = cq + 2 * P * c.hd;
      const auto q = random_bf16(static_cast<size_t>(rows * cq), 51, 3.0f);
      const auto k = random_bf16(static_cast<size_t>(rows * ckv), 52);
      const auto v = random_bf16(static_cast<size_t>(rows * ckv), 53);
      const auto dqkv = random_bf16(static_cast<size_t>(rows * width), 54);

      std::vector<float> qkv32(static_cast<size_t>(rows * width)), dq32(q.size()), dk32(k.size()), dv32(v.size());
      rope_pack_qkv_isa(VectorIsa::kBaseline, widened(q).data(), widened(k).data(), widened(v).data(), qkv32.data(),
                        s);
      rope_pack_qkv_backward_isa(VectorIsa::kBaseline, widened(dqkv).data(), dq32.data(), dk32.data(), dv32.data(),
                                 s);
      const std::vector<std::vector<uint16_t>> want{narrowed(qkv32), narrowed(dq32), narrowed(dk32), narrowed(dv32)};
      norm += test::l2_norm(qkv32) + test::l2_norm(dk32);

      const std::string what = "hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) + " hd " +
                               std::to_string(c.hd) + " rows " + std::to_string(rows) + (grouped ? " grouped" : "");
      test::for_each_isa_path_and_threads(test::kEveryIsaPath, {1, 2}, [&](VectorIsa isa, int threads) {
        std::vector<std::vector<uint16_t>> got{std::vector<uint16_t>(want[0].size(), 0x7fc1),
                                               std::vector<uint16_t>(q.size(), 0x7fc1),
                                               std::vector<uint16_t>(k.size(), 0x7fc1),
                                               std::vector<uint16_t>(v.size(), 0x7fc1)};
        rope_pack_qkv_isa(isa, q.data(), k.data(), v.data(), got[0].data(), s);
        rope_pack_qkv_backward_isa(isa, dqkv.data(), got[1].data(), got[2].data(), got[3].data(), s);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i], want[i]) << "output " << i << ", " << test::isa_label(isa) << ", threads " << threads
                                     << ", " << what;
          ++compared;
        }
      });
    }
  }
  EXPECT_GT(norm, 0.0);
  EXPECT_GE(compared, 8 * 2 * 4 * 2);  // at least the baseline path at both thread counts
}

TEST(KernelRope, AngleIsTheF32ProductOfInvFreqAndPosition) {
  // Position 0 is the identity; inv_freq follows theta^(-2i/hd) to f32 precision; the angle is the f32 product.
  for (int64_t i = 0; i < 16; ++i) {
    const double exact = std::pow(10000.0, -2.0 * double(i) / 32.0);
    EXPECT_NEAR(rope_inv_freq(i, 32, 10000.0f), exact, 1e-6 * exact) << "pair " << i;
    RopeShape s;
    s.head_dim = 32;
    s.position_offset = 4000;
    EXPECT_EQ(rope_angle(95, i, s), 4095.0f * rope_inv_freq(i, 32, 10000.0f));
  }
  RopeShape s{1, 1, 1, 1, 4, 10000.0f, 0};
  const std::vector<float> q{0.3f, -0.7f, 1.1f, 0.9f}, k{0.5f, 0.2f, -0.4f, 0.8f}, v{1.5f, -2.5f, 0.25f, 3.0f};
  std::vector<float> qkv(12);
  rope_pack_qkv(q.data(), k.data(), v.data(), qkv.data(), s);
  EXPECT_EQ(std::vector<float>(qkv.begin(), qkv.begin() + 4), q);
  EXPECT_EQ(std::vector<float>(qkv.begin() + 4, qkv.begin() + 8), k);
  EXPECT_EQ(std::vector<float>(qkv.begin() + 8, qkv.end()), v);
}

}  // namespace
}  // namespace cleave::kernels::cpu::rope_test
