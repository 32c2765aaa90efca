// Token / position embeddings: forward gathers rows exactly, backward accumulates (+=) with repeated ids
// summed, position embedding broadcast over the batch, and out-of-range ids raising cleave::Error that
// names the id, its position and the vocabulary size.
#include "kernels/cpu/embedding.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::embedding_test {
namespace {

TEST(KernelEmbedding, ForwardGathersRows) {
  for (auto [n, dim, vocab] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 5}, {65, 37, 101}, {300, 300, 50}}) {
    const auto table = test::random_floats(static_cast<size_t>(vocab * dim), 60);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 31 + 7) % vocab);
    auto out = test::poisoned(static_cast<size_t>(n * dim));
    embedding_forward(ids.data(), table.data(), out.data(), n, dim, vocab);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) ASSERT_EQ(out[i * dim + c], table[ids[i] * dim + c]);
    EXPECT_GT(test::l2_norm(out), 0.0);
  }
}

TEST(KernelEmbedding, BackwardAccumulatesRepeatedIds) {
  for (auto [n, dim, vocab] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {13, 7, 3}, {65, 600, 11}}) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 5 + 1) % vocab);  // repeats
    const auto dout = test::random_floats(static_cast<size_t>(n * dim), 61);
    auto dtable = test::random_floats(static_cast<size_t>(vocab * dim), 62);
    std::vector<double> want(dtable.begin(), dtable.end());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) want[ids[i] * dim + c] += 2.0 * dout[i * dim + c];
    embedding_backward(ids.data(), dout.data(), dtable.data(), n, dim);
    embedding_backward(ids.data(), dout.data(), dtable.data(), n, dim);
    test::expect_close(dtable, want, 1e-5, 1e-5, "dtable accumulated twice");
    EXPECT_GT(test::l2_norm(dtable), 0.0);
  }
}

TEST(KernelEmbedding, OutOfRangeIdThrowsWithDetails) {
  const auto table = test::random_floats(4 * 3, 63);
  std::vector<float> out(3 * 3);
  for (int32_t bad : {4, 1000, -1}) {
    const std::vector<int32_t> ids = {0, 3, bad};
    try {
      embedding_forward(ids.data(), table.data(), out.data(), 3, 3, 4);
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("position 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("vocab_size 4"), std::string::npos) << msg;
    }
  }
}

TEST(KernelEmbedding, PositionForwardAndBackward) {
  for (auto [B, T, D] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 7, 13}, {2, 65, 300}}) {
    auto x = test::random_floats(static_cast<size_t>(B * T * D), 64);
    const auto pos = test::random_floats(static_cast<size_t>(T * D), 65);
    std::vector<double> want(x.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < D; ++c) want[(b * T + t) * D + c] = double(x[(b * T + t) * D + c]) + pos[t * D + c];
    position_embedding_forward(x.data(), pos.data(), B, T, D);
    test::expect_close(x, want, 1e-6, 1e-6, "position forward");

    const auto dx = test::random_floats(x.size(), 66);
    auto dpos = test::random_floats(pos.size(), 67);
    std::vector<double> want_dpos(dpos.begin(), dpos.end());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < D; ++c) want_dpos[t * D + c] += 2.0 * dx[(b * T + t) * D + c];
    position_embedding_backward(dx.data(), dpos.data(), B, T, D);
    position_embedding_backward(dx.data(), dpos.data(), B, T, D);
    test::expect_close(dpos, want_dpos, 1e-5, 1e-5, "dpos accumulated twice");
    EXPECT_GT(test::l2_norm(dpos), 0.0);
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::embedding_test
