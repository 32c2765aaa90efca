// CUDA embeddings against kernels/cpu/embedding, bit for bit: the forward is a copy, and the backward adds
// each table row's gradients in token order exactly as the CPU kernel does, so even with heavily repeated ids
// (a 7-word vocabulary, every token the same id) the result must be identical, and identical across runs.
// Position embeddings likewise. Workspaces and outputs are poisoned first. A bad id is recorded (smallest
// position, with the id), and gets a zero row; the seam's message is tested in tests/gpu/ops.
#include "kernels/cuda/embedding.hpp"

#include <gtest/gtest.h>

#include <tuple>

#include "kernels/cpu/embedding.hpp"
#include "kernels/cuda/index_status.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::embedding_test {
namespace {

namespace kc = kernels::cuda;

class CudaEmbedding : public CudaTest, public ::testing::WithParamInterface<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(CudaEmbedding, ForwardAndBackwardAreBitIdenticalToCpu) {
  const auto [n_tokens, dim, vocab] = GetParam();
  const auto ids = random_ints(static_cast<size_t>(n_tokens), 0, static_cast<int32_t>(vocab - 1));
  const auto table = random_floats(static_cast<size_t>(vocab * dim));
  const auto dout = random_floats(static_cast<size_t>(n_tokens * dim));
  const auto dtable0 = random_floats(static_cast<size_t>(vocab * dim));
  std::vector<float> out(static_cast<size_t>(n_tokens * dim));
  kernels::cpu::embedding_forward(ids.data(), table.data(), out.data(), n_tokens, dim, vocab);
  std::vector<float> dtable = dtable0;
  kernels::cpu::embedding_backward(ids.data(), dout.data(), dtable.data(), n_tokens, dim);

  Tensor d_ids = upload(ids, DType::kI32);
  Tensor d_table = upload_f32(table);
  Tensor d_out = poisoned(n_tokens * dim);
  Tensor status = poisoned(2, DType::kI32);
  auto* status_ptr = static_cast<uint64_t*>(status.raw_data());
  kc::reset_index_status(status_ptr, 1, stream());
  const kc::EmbeddingRange whole{0, vocab, vocab};
  kc::embedding_forward(d_ids.data<int32_t>(), d_table.raw_data(), kc::FloatType::kF32, d_out.raw_data(),
                        kc::FloatType::kF32, status_ptr,
                        n_tokens, dim, whole, stream());
  expect_bitwise_equal(download_f32(d_out), out, "embedding_forward");
  EXPECT_FALSE(kc::read_index_status(status_ptr, stream()).has_value());

  const std::size_t ws_bytes = kc::embedding_backward_workspace_size(n_tokens, vocab);
  Tensor ws = workspace(ws_bytes);
  Tensor d_dout = upload_f32(dout);
  for (int run = 0; run < 2; ++run) {
    CLEAVE_CUDA_CHECK(cudaMemsetAsync(ws.raw_data(), 0xff, ws.nbytes(), stream()));
    Tensor d_dtable = upload_f32(dtable0);
    kc::embedding_backward(d_ids.data<int32_t>(), d_dout.raw_data(), kc::FloatType::kF32, d_dtable.data<float>(),
                           n_tokens, dim, whole, ws.raw_data(), ws_bytes, stream());
    expect_bitwise_equal(download_f32(d_dtable), dtable, "embedding_backward run " + std::to_string(run));
  }
}

TEST_P(CudaEmbedding, EveryTokenTheSameIdIsTheWorstBucket) {
  const auto [n_tokens, dim, vocab] = GetParam();
  const std::vector<int32_t> ids(static_cast<size_t>(n_tokens), static_cast<int32_t>(vocab - 1));
  const auto dout = random_floats(static_cast<size_t>(n_tokens * dim));
  const auto dtable0 = random_floats(static_cast<size_t>(vocab * dim));
  std::vector<float> dtable = dtable0;
  kernels::cpu::embedding_backward(ids.data(), dout.data(), dtable.data(), n_tokens, dim);
  Tensor d_ids = upload(ids, DType::kI32);
  Tensor d_dout = upload_f32(dout);
  Tensor d_dtable = upload_f32(dtable0);
  const std::size_t ws_bytes = kc::embedding_backward_workspace_size(n_tokens, vocab);
  Tensor ws = workspace(ws_bytes);
  kc::embedding_backward(d_ids.data<int32_t>(), d_dout.raw_data(), kc::FloatType::kF32, d_dtable.data<float>(),
                         n_tokens, dim, kc::EmbeddingRange{0, vocab, vocab}, ws.raw_data(), ws_bytes, stream());
  expect_bitwise_equal(download_f32(d_dtable), dtable, "embedding_backward, one id");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEmbedding,
                         ::testing::Values(std::make_tuple(int64_t{1}, int64_t{1}, int64_t{1}),
                                           std::make_tuple(int64_t{37}, int64_t{5}, int64_t{7}),
                                           std::make_tuple(int64_t{1000}, int64_t{64}, int64_t{50257}),
                                           std::make_tuple(int64_t{4096}, int64_t{33}, int64_t{300}),
                                           std::make_tuple(int64_t{8192}, int64_t{768}, int64_t{1031})));

class CudaPositionEmbedding : public CudaTest,
                              public ::testing::WithParamInterface<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(CudaPositionEmbedding, ForwardAndBackwardAreBitIdenticalToCpu) {
  const auto [B, T, D] = GetParam();
  const auto x0 = random_floats(static_cast<size_t>(B * T * D));
  const auto pos = random_floats(static_cast<size_t>((T + 2) * D));  // longer than T, as a context-length table is
  const auto dpos0 = random_floats(pos.size());
  std::vector<float> x = x0;
  kernels::cpu::position_embedding_forward(x.data(), pos.data(), B, T, D);
  std::vector<float> dpos = dpos0;
  kernels::cpu::position_embedding_backward(x0.data(), dpos.data(), B, T, D);

  Tensor d_x = upload_f32(x0);
  Tensor d_pos = upload_f32(pos);
  kc::position_embedding_forward(d_x.raw_data(), kc::FloatType::kF32, d_pos.raw_data(), kc::FloatType::kF32, B, T, D,
                                 stream());
  expect_bitwise_equal(download_f32(d_x), x, "position_embedding_forward");
  Tensor d_dx = upload_f32(x0);
  Tensor d_dpos = upload_f32(dpos0);
  kc::position_embedding_backward(d_dx.raw_data(), kc::FloatType::kF32, d_dpos.data<float>(), B, T, D, stream());
  expect_bitwise_equal(download_f32(d_dpos), dpos, "position_embedding_backward");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaPositionEmbedding,
                         ::testing::Values(std::make_tuple(int64_t{1}, int64_t{1}, int64_t{1}),
                                           std::make_tuple(int64_t{3}, int64_t{17}, int64_t{9}),
                                           std::make_tuple(int64_t{8}, int64_t{1024}, int64_t{768})));

using CudaEmbeddingErrors = CudaTest;

TEST_F(CudaEmbeddingErrors, BadIdsAreRecordedZeroedAndReported) {
  const int64_t n_tokens = 12, dim = 6, vocab = 10;
  auto ids = random_ints(static_cast<size_t>(n_tokens), 0, vocab - 1);
  ids[9] = -1;
  ids[4] = static_cast<int32_t>(vocab);
  const auto table = random_floats(static_cast<size_t>(vocab * dim));
  Tensor d_ids = upload(ids, DType::kI32);
  Tensor d_table = upload_f32(table);
  Tensor d_out = poisoned(n_tokens * dim);
  Tensor status = poisoned(2, DType::kI32);
  auto* status_ptr = static_cast<uint64_t*>(status.raw_data());
  kc::reset_index_status(status_ptr, 1, stream());
  kc::embedding_forward(d_ids.data<int32_t>(), d_table.raw_data(), kc::FloatType::kF32, d_out.raw_data(),
                        kc::FloatType::kF32, status_ptr,
                        n_tokens, dim, kc::EmbeddingRange{0, vocab, vocab}, stream());
  const std::optional<kc::BadIndex> bad = kc::read_index_status(status_ptr, stream());
  ASSERT_TRUE(bad.has_value()) << "a bad id was not recorded";
  EXPECT_EQ(bad->position, 4);  // the smallest bad position, with its id
  EXPECT_EQ(bad->value, static_cast<int32_t>(vocab));
  const auto out = download_f32(d_out);
  for (int64_t i = 0; i < n_tokens; ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      const float got = out[static_cast<size_t>(i * dim + c)];
      const int32_t id = ids[static_cast<size_t>(i)];
      const float want = (id < 0 || id >= vocab) ? 0.0f : table[static_cast<size_t>(id * dim + c)];
      EXPECT_EQ(got, want) << "token " << i << " column " << c;
    }
  }
}

}  // namespace
}  // namespace cleave::testing::embedding_test
