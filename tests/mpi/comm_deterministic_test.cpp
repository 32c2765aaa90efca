// Deterministic mode: floating-point all_reduce / reduce_scatter results are bit-identical to the canonical
// sum over ranks (engine/core/sum_tree.hpp: split at the largest power of two below n, left part first; in
// f32, 16-bit types rounded once), identical across repetitions and across message cuts; plain mode agrees
// with a double-precision reference within rounding.
//
// Inputs span eight orders of magnitude so that summation order changes the bits: the test also checks
// that the reverse-order sum differs somewhere, i.e. that it could detect a wrong order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"
#include "tests/reference/sum_tree_reference.hpp"

namespace cleave::testing::comm_deterministic_test {
namespace {

using comm::ReduceOp;

// Rank q's input, reproducible on every rank: random sign and mantissa, decimal exponent in [-4, 4] ([-2, 3]
// for f16, whose range ends at 65504), never zero.
std::vector<float> input_of(int rank, std::int64_t count, int salt, DType dtype) {
  std::mt19937 gen(static_cast<unsigned>(1234 + 97 * rank + 7919 * salt));
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(dtype == DType::kF16 ? -2 : -4, dtype == DType::kF16 ? 3 : 4);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = (sign(gen) ? -1.0f : 1.0f) * mantissa(gen) * std::pow(10.0f, static_cast<float>(exponent(gen)));
  return v;
}

// The value a 16-bit dtype stores for x (inputs are quantized before summing).
float quantize(float x, DType dtype) {
  if (dtype == DType::kBF16) return bf16_to_float(float_to_bf16(x));
  if (dtype == DType::kF16) return comm::f16_to_float(comm::float_to_f16(x));
  return x;
}

Tensor tensor_of(const std::vector<float>& v, DType dtype) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(v.size())}, dtype, MemoryCategory::kActivations, cpu_allocator());
  for (std::size_t i = 0; i < v.size(); ++i) set_value(t, static_cast<std::int64_t>(i), v[i]);
  return t;
}


// Canonical (or, to show order matters, reversed left-to-right) f32 sum over ranks of element i, rounded
// once into dtype.
std::vector<float> ordered_sum(int n, std::int64_t count, int salt, DType dtype, bool reversed) {
  std::vector<std::vector<float>> inputs;
  for (int q = 0; q < n; ++q) inputs.push_back(input_of(q, count, salt, dtype));
  std::vector<float> out(static_cast<std::size_t>(count));
  std::vector<float> terms(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < count; ++i) {
    for (int q = 0; q < n; ++q) {
      terms[static_cast<std::size_t>(q)] = quantize(inputs[static_cast<std::size_t>(q)][static_cast<std::size_t>(i)], dtype);
    }
    float acc = 0;
    if (reversed) {
      for (int k = n - 1; k >= 0; --k) acc = k == n - 1 ? terms[static_cast<std::size_t>(k)] : acc + terms[static_cast<std::size_t>(k)];
    } else {
      acc = canonical_sum_reference(terms, 0, terms.size());
    }
    out[static_cast<std::size_t>(i)] = quantize(acc, dtype);
  }
  return out;
}

std::int64_t bit_mismatches(const Tensor& t, const std::vector<float>& expected) {
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const float got = static_cast<float>(get_value(t, i));
    wrong += std::memcmp(&got, &expected[static_cast<std::size_t>(i)], sizeof got) != 0;
  }
  return wrong;
}

class Deterministic : public ::testing::TestWithParam<DType> {};

TEST_P(Deterministic, AllReduceEqualsOrderedSumBitForBitAcrossRepeatsAndPieces) {
  const DType dtype = GetParam();
  auto det = make_world(true);
  auto det_pieces = make_world(true, 11);
  auto plain = make_world(false);  // every floating type takes the rank-ordered protocol in plain mode too
  std::vector<comm::MpiCommunicator*> comms{det.get(), det_pieces.get(), plain.get()};
  const int n = det->size();
  const int r = det->rank();
  for (std::int64_t count : {1, 7, 4099}) {
    const auto expected = ordered_sum(n, count, 1, dtype, false);
    // f32 only: rounding into 16 bits hides most reorderings, so for them a wrong order may go unseen.
    if (n > 2 && count > 1000 && dtype == DType::kF32) {
      EXPECT_GT(bit_mismatches(tensor_of(expected, dtype), ordered_sum(n, count, 1, dtype, true)), 0)
          << "inputs too tame: the order of summation does not matter, the test could not fail";
    }
    for (int repeat = 0; repeat < 3; ++repeat) {
      for (auto* comm : comms) {
        Tensor t = tensor_of(input_of(r, count, 1, dtype), dtype);
        comm->all_reduce(t, ReduceOp::kSum)->wait();
        EXPECT_EQ(bit_mismatches(t, expected), 0) << dtype_name(dtype) << " x" << count << " repeat " << repeat
                                                  << " max_message " << comm->mpi_options().max_message_elements
                                                  << (comm->options().deterministic ? "" : " plain mode");
      }
    }
  }
}

TEST_P(Deterministic, ReduceScatterEqualsOrderedSumBitForBit) {
  const DType dtype = GetParam();
  auto det = make_world(true);
  auto plain = make_world(false);
  const int n = det->size();
  const int r = det->rank();
  const std::int64_t per_rank = 2053;
  const auto expected_all = ordered_sum(n, per_rank * n, 2, dtype, false);
  const std::vector<float> expected(expected_all.begin() + r * per_rank, expected_all.begin() + (r + 1) * per_rank);
  for (auto* comm : {det.get(), plain.get()}) {
    for (bool in_place : {false, true}) {
      Tensor input = tensor_of(input_of(r, per_rank * n, 2, dtype), dtype);
      Tensor output = in_place ? input.slice(r * per_rank, (r + 1) * per_rank)
                               : Tensor::empty({per_rank}, dtype, MemoryCategory::kActivations, cpu_allocator());
      comm->reduce_scatter(input, output)->wait();
      EXPECT_EQ(bit_mismatches(output, expected), 0)
          << dtype_name(dtype) << (in_place ? " in place" : "") << (comm == plain.get() ? " plain mode" : "");
    }
  }
}

// The property data parallelism relies on: every rank sums its own block of 2^j terms canonically, the
// deterministic all_reduce sums the block sums; the result equals one rank's canonical sum of all the terms.
TEST(DeterministicBlocks, RanksSummingTheirBlocksEqualOneRankSummingEverything) {
  auto det = make_world(true);
  const int n = det->size();
  const int r = det->rank();
  const std::int64_t count = 3001;
  for (std::size_t per_rank : {1u, 2u, 4u}) {
    // Term t of element i: rank t / per_rank's input, salted by the term's position in its block.
    std::vector<std::vector<float>> terms(static_cast<std::size_t>(n) * per_rank);
    for (std::size_t t = 0; t < terms.size(); ++t) {
      terms[t] = input_of(static_cast<int>(t / per_rank), count, 10 + static_cast<int>(t % per_rank), DType::kF32);
    }
    std::vector<float> column(terms.size());
    std::vector<float> expected(static_cast<std::size_t>(count));
    std::vector<float> left_to_right(static_cast<std::size_t>(count));
    Tensor mine = Tensor::empty({count}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < count; ++i) {
      const auto e = static_cast<std::size_t>(i);
      for (std::size_t t = 0; t < terms.size(); ++t) column[t] = terms[t][e];
      expected[e] = canonical_sum_reference(column, 0, column.size());
      left_to_right[e] = column[0];
      for (std::size_t t = 1; t < column.size(); ++t) left_to_right[e] += column[t];
      const std::size_t first = static_cast<std::size_t>(r) * per_rank;
      mine.data<float>()[i] = canonical_sum_reference(column, first, first + per_rank);
    }
    det->all_reduce(mine, ReduceOp::kSum)->wait();
    EXPECT_EQ(bit_mismatches(mine, expected), 0) << n << " ranks x " << per_rank << " terms";
    if (n * per_rank >= 4) {  // the tree and the plain left-to-right sum differ: the check has teeth
      EXPECT_GT(bit_mismatches(tensor_of(left_to_right, DType::kF32), expected), 0);
    }
  }
}

TEST_P(Deterministic, MaxIsExactAndPlainSumIsCloseToDoubleReference) {
  const DType dtype = GetParam();
  auto plain = make_world(false);
  auto det = make_world(true);
  const int n = plain->size();
  const int r = plain->rank();
  const std::int64_t count = 3001;
  std::vector<std::vector<float>> inputs;
  for (int q = 0; q < n; ++q) inputs.push_back(input_of(q, count, 3, dtype));
  for (auto* comm : {plain.get(), det.get()}) {
    Tensor t = tensor_of(inputs[static_cast<std::size_t>(r)], dtype);
    comm->all_reduce(t, ReduceOp::kMax)->wait();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      float m = quantize(inputs[0][static_cast<std::size_t>(i)], dtype);
      for (int q = 1; q < n; ++q) m = std::max(m, quantize(inputs[static_cast<std::size_t>(q)][static_cast<std::size_t>(i)], dtype));
      wrong += static_cast<float>(get_value(t, i)) != m;
    }
    EXPECT_EQ(wrong, 0) << "max " << dtype_name(dtype) << (comm == det.get() ? " deterministic" : " plain");
  }
  Tensor t = tensor_of(inputs[static_cast<std::size_t>(r)], dtype);
  plain->all_reduce(t, ReduceOp::kSum)->wait();
  const double unit = dtype == DType::kF32 ? 0x1p-24 : dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
  std::int64_t far = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    double exact = 0;
    double magnitude = 0;
    for (int q = 0; q < n; ++q) {
      const double x = quantize(inputs[static_cast<std::size_t>(q)][static_cast<std::size_t>(i)], dtype);
      exact += x;
      magnitude += std::abs(x);
    }
    // f32 accumulation error (n ulps of the magnitude) plus one rounding into the dtype.
    const double bound = n * 0x1p-24 * magnitude + unit * std::abs(exact);
    far += std::abs(get_value(t, i) - exact) > bound;
  }
  EXPECT_EQ(far, 0) << "plain sum " << dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, Deterministic, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace cleave::testing::comm_deterministic_test
