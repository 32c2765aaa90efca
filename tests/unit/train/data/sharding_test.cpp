// The DataSource contract: sample i of the global batch at step s is fixed by (seed, split, s, i); dp rank r
// reads its contiguous slice and micro-batch j the contiguous slice of that; finite sets cover every sample
// once per epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "data_test_util.hpp"
#include "engine/core/rng.hpp"
#include "engine/train/data/digits.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/data/synthetic.hpp"

namespace cleave::train::sharding_test {
namespace {

// Row `row` of a batch as raw bytes (inputs then targets), for exact comparison across dtypes.
std::vector<std::byte> row_bytes(const Batch& b, std::int64_t row) {
  if (row < 0 || row >= b.size()) throw std::out_of_range("row_bytes: row outside the batch");
  const std::size_t in_row = b.inputs.nbytes() / static_cast<std::size_t>(b.size());
  const std::size_t tg_row = b.targets.nbytes() / static_cast<std::size_t>(b.size());
  std::vector<std::byte> out(in_row + tg_row);
  std::memcpy(out.data(), static_cast<const std::byte*>(b.inputs.raw_data()) + row * in_row, in_row);
  std::memcpy(out.data() + in_row, static_cast<const std::byte*>(b.targets.raw_data()) + row * tg_row, tg_row);
  return out;
}

// For every layout of a 12-sample global batch, the rows each (rank, micro-batch) reads equal the
// corresponding rows of the single-rank, single-micro-batch reference.
void expect_layout_invariant(const DataSource& source, std::int64_t step) {
  const Batch whole = source.next_batch(step, 0, BatchLayout{12, 12, 0, 1}, cpu_allocator());
  ASSERT_EQ(whole.size(), 12);
  std::set<std::uint64_t> distinct;  // rows by content hash
  for (std::int64_t i = 0; i < 12; ++i) {
    const auto bytes = row_bytes(whole, i);
    distinct.insert(rng::hash_key(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
  }
  EXPECT_GE(distinct.size(), 11u) << "samples of one batch should differ";
  for (int dp : {1, 2, 3, 4, 6}) {
    for (std::int64_t micro : {1, 2}) {
      const BatchLayout layout{12, micro, 0, dp};
      if (layout.per_rank() % micro != 0) continue;
      for (int rank = 0; rank < dp; ++rank) {
        BatchLayout mine = layout;
        mine.dp_rank = rank;
        for (std::int64_t j = 0; j < mine.microbatches(); ++j) {
          const Batch part = source.next_batch(step, j, mine, cpu_allocator());
          ASSERT_EQ(part.size(), micro);
          for (std::int64_t r = 0; r < micro; ++r) {
            const std::int64_t global_row = rank * mine.per_rank() + j * micro + r;
            ASSERT_EQ(row_bytes(part, r), row_bytes(whole, global_row))
                << "dp " << dp << " rank " << rank << " micro " << j << " row " << r;
          }
        }
      }
    }
  }
}

TEST(Sharding, SyntheticTokensAreLayoutInvariantAndDeterministic) {
  const SyntheticTokenSource source(97, 11, 42, Split::kTrain);
  for (std::int64_t step : {0, 1, 7}) expect_layout_invariant(source, step);
  const SyntheticTokenSource again(97, 11, 42, Split::kTrain);
  const BatchLayout layout{8, 2, 1, 2};
  EXPECT_EQ(row_bytes(source.next_batch(5, 1, layout, cpu_allocator()), 1),
            row_bytes(again.next_batch(5, 1, layout, cpu_allocator()), 1));
  // Another step, seed or split gives other samples.
  const Batch a = source.next_batch(5, 0, layout, cpu_allocator());
  EXPECT_NE(row_bytes(a, 0), row_bytes(source.next_batch(6, 0, layout, cpu_allocator()), 0));
  EXPECT_NE(row_bytes(a, 0),
            row_bytes(SyntheticTokenSource(97, 11, 43, Split::kTrain).next_batch(5, 0, layout, cpu_allocator()), 0));
  EXPECT_NE(row_bytes(a, 0),
            row_bytes(SyntheticTokenSource(97, 11, 42, Split::kEval).next_batch(5, 0, layout, cpu_allocator()), 0));
}

TEST(Sharding, SyntheticClassesAreLayoutInvariant) {
  const SyntheticClassSource source(Shape{1, 5, 3}, 7, 3, Split::kTrain);
  expect_layout_invariant(source, 4);
  const Batch b = source.next_batch(0, 0, BatchLayout{4, 4, 0, 1}, cpu_allocator());
  EXPECT_EQ(b.inputs.shape(), (Shape{4, 1, 5, 3}));
  EXPECT_EQ(b.targets.shape(), Shape{4});
}

TEST(Sharding, FiniteSetWalksAPermutationPerEpoch) {
  test_util::TempDir dir;
  const auto path = dir.file("digits.csv");
  {
    std::ofstream out(path);
    for (int row = 0; row < 36; ++row) {  // 36 rows, each with a distinct first pixel pattern
      for (int p = 0; p < 64; ++p) out << (p == 0 ? row % 17 : (p == 1 ? row / 17 : (row * 7 + p) % 17)) << ",";
      out << row % 10 << "\n";
    }
  }
  auto data = std::make_shared<const DigitsData>(read_digits(path));
  const DigitsSource source(data, 0, 36, false, 9, Split::kTrain);
  expect_layout_invariant(source, 2);
  // Global batch 12 over 36 samples: steps 0-2 are epoch 0, steps 3-5 epoch 1; each epoch sees every row once.
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::pair<float, float>> seen;
    for (int step = 3 * epoch; step < 3 * epoch + 3; ++step) {
      const Batch b = source.next_batch(step, 0, BatchLayout{12, 12, 0, 1}, cpu_allocator());
      for (int r = 0; r < 12; ++r) seen.insert({b.inputs.data<float>()[r * 64], b.inputs.data<float>()[r * 64 + 1]});
    }
    std::set<std::pair<float, float>> unique(seen.begin(), seen.end());
    EXPECT_EQ(unique.size(), 36u) << "epoch " << epoch;
  }
  // The two epochs are in different orders.
  EXPECT_NE(row_bytes(source.next_batch(0, 0, BatchLayout{12, 12, 0, 1}, cpu_allocator()), 0),
            row_bytes(source.next_batch(3, 0, BatchLayout{12, 12, 0, 1}, cpu_allocator()), 0));
}

TEST(Sharding, InconsistentLayoutsAreErrors) {
  const SyntheticTokenSource source(16, 4, 1, Split::kTrain);
  test_util::expect_error(
      [&] {
        (void)source.next_batch(0, 0, BatchLayout{10, 2, 0, 3}, cpu_allocator());
      },
      {"global batch 10", "dp size 3"});
  test_util::expect_error(
      [&] {
        (void)source.next_batch(0, 0, BatchLayout{12, 5, 0, 2}, cpu_allocator());
      },
      {"6 samples per dp rank", "micro batch 5"});
  test_util::expect_error(
      [&] {
        (void)source.next_batch(0, 3, BatchLayout{12, 2, 0, 2}, cpu_allocator());
      },
      {"micro-batch 3", "[0, 3)"});
  test_util::expect_error(
      [&] {
        (void)source.next_batch(0, 0, BatchLayout{12, 2, 2, 2}, cpu_allocator());
      },
      {"dp rank 2"});
}

}  // namespace
}  // namespace cleave::train::sharding_test
