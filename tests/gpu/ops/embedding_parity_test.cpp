// Seam parity of the embeddings: ops::embedding_* and ops::position_embedding_* on cuda:0 against the CPU backend.
//
// What it asserts: token embedding forward and backward over the whole table and over tensor-parallel shards
// of a vocabulary (VocabRange with an offset; the last shard holds a padding row), f32 and bf16, vocabularies
// 257 and 1001, with repeated ids — bit-identical to the CPU (tolerance 0: the forward is a copy, the backward
// adds each row's gradients in token order on both, from the same widened values); the padding row of the
// gradient is untouched; position embeddings, f32 and bf16, bit-identical; a token id outside the vocabulary
// gives a zero row and is reported by ops::check_device_status with the CPU kernel's message (the forward
// itself does not wait). Compiled here without a GPU; NOT yet run on one.
#include <gtest/gtest.h>

#include <tuple>

#include "engine/core/error.hpp"
#include "tests/gpu/ops/int_inputs.hpp"
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::embedding_parity_test {
namespace {

class EmbeddingParity : public OpsParity,
                        public ::testing::WithParamInterface<std::tuple<std::int64_t, int, DType>> {};

TEST_P(EmbeddingParity, ShardsForwardAndBackwardAreBitIdentical) {
  const auto [vocab, parts, dtype] = GetParam();
  const std::int64_t batch = 3, seq = 37, dim = 33;
  const std::int64_t rows = (vocab + parts - 1) / parts;  // a shard's table rows (the last may hold padding)
  // Uniform ids, and every 4th the last id of the vocabulary: repeated ids, and rows of the last shard.
  Tensor ids = ints_from_uniform(random({batch, seq}, DType::kF32, 0.0f, static_cast<float>(vocab)),
                                 empty_cpu({batch, seq}, DType::kI32), 0, static_cast<std::int32_t>(vocab - 1));
  for (std::int64_t i = 0; i < batch * seq; i += 4) ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(vocab - 1);
  const Tensor dout = random({batch, seq, dim}, dtype);
  const Tensor g_ids = to_gpu(ids), g_dout = to_gpu(dout);
  for (int p = 0; p < parts; ++p) {
    const std::int64_t first = p * rows;
    const ops::VocabRange range{first, std::min(rows, vocab - first), vocab};
    const Tensor table = random({rows, dim}, dtype);
    Tensor out = empty_cpu({batch, seq, dim}, dtype);
    ops::embedding_forward(cpu(), ids, table, out, range);
    Tensor g_out = poisoned_gpu({batch, seq, dim}, dtype);
    ops::embedding_forward(gpu(), g_ids, to_gpu(table), g_out, range);
    expect_close(out, g_out, 0.0, "embedding_forward shard " + std::to_string(p));

    const Tensor dtable0 = random({rows, dim}, DType::kF32);
    const Tensor g_dtable = to_gpu(dtable0);
    Tensor dtable = empty_cpu({rows, dim}, DType::kF32);
    ops::copy(cpu(), dtable0, dtable);
    ops::embedding_backward(cpu(), ids, dout, dtable, range);
    ops::embedding_backward(gpu(), g_ids, g_dout, g_dtable, range);
    expect_close(dtable, g_dtable, 0.0, "embedding_backward shard " + std::to_string(p));
  }
  EXPECT_NO_THROW(ops::check_device_status(gpu()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingParity,
                         ::testing::Values(std::make_tuple(std::int64_t{257}, 1, DType::kF32),
                                           std::make_tuple(std::int64_t{1001}, 2, DType::kF32),
                                           std::make_tuple(std::int64_t{1001}, 3, DType::kF32),
                                           std::make_tuple(std::int64_t{257}, 1, DType::kBF16),
                                           std::make_tuple(std::int64_t{1001}, 2, DType::kBF16)));

class PositionParity : public OpsParity, public ::testing::WithParamInterface<DType> {};

TEST_P(PositionParity, ForwardAndBackwardAreBitIdentical) {
  const DType dtype = GetParam();
  const std::int64_t batch = 3, seq = 17, dim = 9;
  const Tensor x0 = random({batch, seq, dim}, dtype);
  const Tensor pos = random({seq + 2, dim}, dtype);  // longer than the sequence, as a context-length table is
  Tensor x = empty_cpu(x0.shape(), dtype);
  ops::copy(cpu(), x0, x);
  ops::position_embedding_forward(cpu(), x, pos);
  const Tensor g_x = to_gpu(x0);
  ops::position_embedding_forward(gpu(), g_x, to_gpu(pos));
  expect_close(x, g_x, 0.0, "position_embedding_forward");

  const Tensor dpos0 = random({seq + 2, dim}, DType::kF32);
  Tensor dpos = empty_cpu(dpos0.shape(), DType::kF32);
  ops::copy(cpu(), dpos0, dpos);
  const Tensor g_dpos = to_gpu(dpos0);
  ops::position_embedding_backward(cpu(), x0, dpos);
  ops::position_embedding_backward(gpu(), to_gpu(x0), g_dpos);
  expect_close(dpos, g_dpos, 0.0, "position_embedding_backward");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PositionParity, ::testing::Values(DType::kF32, DType::kBF16));

TEST_F(OpsParity, BadTokenIdGivesAZeroRowAndIsReportedAtTheDeviceStatusCheck) {
  const std::int64_t vocab = 1001, dim = 6;
  Tensor ids = ints_from_uniform(random({2, 6}, DType::kF32, 0.0f, static_cast<float>(vocab)),
                                 empty_cpu({2, 6}, DType::kI32), 0, static_cast<std::int32_t>(vocab - 1));
  ids.data<std::int32_t>()[9] = -1;
  ids.data<std::int32_t>()[4] = static_cast<std::int32_t>(vocab);
  const Tensor table = random({vocab, dim}, DType::kF32);
  Tensor g_out = poisoned_gpu({2, 6, dim}, DType::kF32);
  EXPECT_NO_THROW(ops::embedding_forward(gpu(), to_gpu(ids), to_gpu(table), g_out, {0, vocab, vocab}));
  try {
    ops::check_device_status(gpu());
    FAIL() << "a bad token id was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 1001 at position 4 is out of range [0, 1001)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ops::check_device_status(gpu())) << "the record is cleared once reported";
  const std::vector<float> out = to_cpu(g_out).to_floats();
  for (std::int64_t c = 0; c < dim; ++c) {
    EXPECT_EQ(out[4 * dim + c], 0.0f);
    EXPECT_EQ(out[9 * dim + c], 0.0f);
    EXPECT_EQ(out[0 * dim + c], table.data<float>()[ids.data<std::int32_t>()[0] * dim + c]);
  }
}

}  // namespace
}  // namespace cleave::testing::embedding_parity_test
