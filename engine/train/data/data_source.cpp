// DataSource batch assembly: global-batch indexing, dp sharding, micro-batch slicing, epoch permutations.
#include "engine/train/data/data_source.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"

namespace cleave::train {

void BatchLayout::check() const {
  CLEAVE_CHECK(global_batch_size >= 1 && micro_batch_size >= 1 && dp_size >= 1,
               "batch layout: global batch {}, micro batch {} and dp size {} must be positive", global_batch_size,
               micro_batch_size, dp_size);
  CLEAVE_CHECK(dp_rank >= 0 && dp_rank < dp_size, "batch layout: dp rank {} is outside [0, {})", dp_rank, dp_size);
  CLEAVE_CHECK(global_batch_size % dp_size == 0, "batch layout: global batch {} is not divisible by dp size {}",
               global_batch_size, dp_size);
  CLEAVE_CHECK(per_rank() % micro_batch_size == 0,
               "batch layout: {} samples per dp rank (global {} / dp {}) are not divisible by micro batch {}",
               per_rank(), global_batch_size, dp_size, micro_batch_size);
}

std::string_view split_name(Split split) { return split == Split::kTrain ? "train" : "eval"; }

DataSource::DataSource(std::uint64_t seed, std::string_view stream)
    : seed_(seed), key_(rng::hash_key(std::string("data.") + std::string(stream))) {}

std::uint64_t DataSource::sample_id(std::int64_t step, std::int64_t index, std::int64_t global_batch_size) const {
  CLEAVE_ASSERT(step >= 0 && index >= 0 && index < global_batch_size, "sample {} of step {}", index, step);
  const std::int64_t n = size();
  if (n == 0) {
    CLEAVE_ASSERT(index < (std::int64_t{1} << 32) && step < (std::int64_t{1} << 32), "step {} index {}", step, index);
    return rng::bits64(seed_, key_, (static_cast<std::uint64_t>(step) << 32) | static_cast<std::uint64_t>(index));
  }
  const auto position = static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(global_batch_size) +
                        static_cast<std::uint64_t>(index);
  const std::lock_guard<std::mutex> lock(order_mutex_);
  const auto& order = epoch_order(position / static_cast<std::uint64_t>(n));
  return static_cast<std::uint64_t>(order[position % static_cast<std::uint64_t>(n)]);
}

const std::vector<std::int64_t>& DataSource::epoch_order(std::uint64_t epoch) const {
  if (auto it = orders_.find(epoch); it != orders_.end()) return it->second;
  if (orders_.size() >= 2) orders_.erase(orders_.begin());
  const std::int64_t n = size();
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates with counter-based draws: the permutation of an epoch depends only on (seed, split, epoch).
  const std::uint64_t key = key_ ^ 0x9e3779b97f4a7c15ull;
  for (std::int64_t j = n - 1; j > 0; --j) {
    const std::uint64_t draw = rng::bits64(seed_, key, epoch * static_cast<std::uint64_t>(n) + static_cast<std::uint64_t>(j));
    std::swap(order[static_cast<std::size_t>(j)], order[draw % static_cast<std::uint64_t>(j + 1)]);
  }
  return orders_.emplace(epoch, std::move(order)).first->second;
}

Batch DataSource::allocate(std::int64_t rows, Allocator& allocator) const {
  auto with_batch = [rows](const Shape& sample) {  // [rows, sample...], built in place (the Shape checks the rank)
    std::array<std::int64_t, Shape::kMaxDims + 1> dims{rows};
    std::copy(sample.dims().begin(), sample.dims().end(), dims.begin() + 1);
    return Shape(std::span<const std::int64_t>(dims.data(), sample.dims().size() + 1));
  };
  Batch batch;
  batch.inputs = Tensor::empty(with_batch(sample_shape()), input_dtype(), MemoryCategory::kActivations, allocator);
  batch.targets = Tensor::empty(with_batch(target_shape()), DType::kI32, MemoryCategory::kActivations, allocator);
  return batch;
}

void DataSource::fill_row(Batch& batch, std::int64_t row, std::uint64_t id) const {
  const std::size_t input_row_bytes = static_cast<std::size_t>(sample_shape().numel()) * dtype_size(input_dtype());
  const std::int64_t target_row = target_shape().numel();
  auto* input = static_cast<std::byte*>(batch.inputs.raw_data()) + static_cast<std::size_t>(row) * input_row_bytes;
  write_sample(id, input, batch.targets.data<std::int32_t>() + row * target_row);
}

Batch DataSource::next_batch(std::int64_t step, std::int64_t microbatch, const BatchLayout& layout,
                             Allocator& allocator) const {
  layout.check();
  CLEAVE_CHECK(step >= 0, "next_batch: step must be ≥ 0, got {}", step);
  CLEAVE_CHECK(microbatch >= 0 && microbatch < layout.microbatches(),
               "next_batch: micro-batch {} is outside [0, {}) (per-rank batch {} / micro batch {})", microbatch,
               layout.microbatches(), layout.per_rank(), layout.micro_batch_size);
  CLEAVE_ASSERT(allocator.device().is_cpu(), "data sources fill host memory; copy the batch to the device");
  Batch batch = allocate(layout.micro_batch_size, allocator);
  const std::int64_t first = layout.dp_rank * layout.per_rank() + microbatch * layout.micro_batch_size;
  for (std::int64_t row = 0; row < layout.micro_batch_size; ++row) {
    fill_row(batch, row, sample_id(step, first + row, layout.global_batch_size));
  }
  return batch;
}

Batch DataSource::samples(std::int64_t first, std::int64_t count, Allocator& allocator) const {
  CLEAVE_CHECK(size() > 0, "samples(): {} is not a finite set; use next_batch()", describe());
  CLEAVE_CHECK(first >= 0 && count >= 1 && first + count <= size(), "samples [{}, {}) are outside [0, {}) of {}",
               first, first + count, size(), describe());
  Batch batch = allocate(count, allocator);
  for (std::int64_t row = 0; row < count; ++row) fill_row(batch, row, static_cast<std::uint64_t>(first + row));
  return batch;
}

}  // namespace cleave::train
