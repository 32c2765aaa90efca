// DataSource: deterministic batches for training and evaluation, sharded over data-parallel ranks.
//
// Invariants:
//  - Sample i of the global batch at step s depends only on (seed, split, s, i) (and, for finite sets,
//    the global batch size, which fixes the epoch order): never on dp size, micro-batch size or the
//    order in which batches are asked for. So every parallel layout with the same global batch sees the
//    same samples.
//  - dp rank r of D reads samples [r · G/D, (r + 1) · G/D) of the global batch G; its micro-batch j is the
//    contiguous slice [j · B, (j + 1) · B) of that (B = micro-batch size).
//  - Streams (token files, synthetic tasks) draw each sample from a counter-based RNG; finite sets
//    (digits) walk a per-epoch permutation, so each epoch sees every sample once.
//  - A source is immutable after construction (next_batch is const and thread-safe).
//
// Extending: derive from DataSource, report the per-sample shapes, and implement write_sample().
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::train {

struct Batch {
  Tensor inputs;   // i32 [B, T] token ids, or f32 [B, ...] features
  Tensor targets;  // i32 [B, T] next tokens, or i32 [B] class labels
  std::int64_t size() const { return inputs.defined() ? inputs.dim(0) : 0; }
};

// How one optimizer step's global batch is cut: over dp ranks, then into micro-batches.
struct BatchLayout {
  std::int64_t global_batch_size = 1;
  std::int64_t micro_batch_size = 1;
  int dp_rank = 0;
  int dp_size = 1;

  std::int64_t per_rank() const { return global_batch_size / dp_size; }
  std::int64_t microbatches() const { return per_rank() / micro_batch_size; }
  // Throws Error unless global % dp == 0, per-rank % micro == 0 and 0 <= dp_rank < dp_size.
  void check() const;
};

enum class Split { kTrain, kEval };
std::string_view split_name(Split split);  // "train" | "eval"

class DataSource {
 public:
  virtual ~DataSource() = default;
  DataSource(const DataSource&) = delete;
  DataSource& operator=(const DataSource&) = delete;

  // "llm.c token shard data/a.bin: tokens [0, 9000) of 10000 (train split)".
  virtual std::string describe() const = 0;
  // Per-sample input shape and dtype ([T] i32 tokens; [64] or [1, 8, 8] f32) and target shape ([T] or []).
  virtual Shape sample_shape() const = 0;
  virtual DType input_dtype() const = 0;
  virtual Shape target_shape() const = 0;
  // Number of samples of a finite set (digits); 0 for streams that draw samples at random.
  virtual std::int64_t size() const { return 0; }

  // Micro-batch `microbatch` of this rank's shard of the global batch at `step` (0-based), allocated from
  // `allocator` (kActivations). Throws Error when the layout is inconsistent.
  Batch next_batch(std::int64_t step, std::int64_t microbatch, const BatchLayout& layout, Allocator& allocator) const;
  // Finite sets only: samples [first, first + count) in stored order (a full pass over a test split).
  Batch samples(std::int64_t first, std::int64_t count, Allocator& allocator) const;

 protected:
  // `stream` separates the random streams of the splits ("train", "eval").
  DataSource(std::uint64_t seed, std::string_view stream);
  // Writes one sample: input gets sample_shape() elements of input_dtype(), target gets target_shape()
  // i32 elements. For a finite set `id` is an index in [0, size()); for a stream a 64-bit random draw.
  virtual void write_sample(std::uint64_t id, void* input, std::int32_t* target) const = 0;

 private:
  std::uint64_t sample_id(std::int64_t step, std::int64_t index, std::int64_t global_batch_size) const;
  Batch allocate(std::int64_t rows, Allocator& allocator) const;
  void fill_row(Batch& batch, std::int64_t row, std::uint64_t id) const;
  const std::vector<std::int64_t>& epoch_order(std::uint64_t epoch) const;  // caller holds order_mutex_

  std::uint64_t seed_;
  std::uint64_t key_;
  mutable std::mutex order_mutex_;
  mutable std::map<std::uint64_t, std::vector<std::int64_t>> orders_;  // epoch -> permutation (≤ 2 kept)
};

}  // namespace cleave::train
