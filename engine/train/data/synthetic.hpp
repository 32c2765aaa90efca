// Synthetic learnable tasks, the built-in default data (no files). The task itself (transition table,
// class centres) is fixed by a constant task seed, so every run and every split share one task; train.seed
// only chooses which samples are drawn.
//
// Tokens: a random sparse Markov chain over the vocabulary. Each token v has kSuccessors fixed successors;
// the next token is one of them uniformly. A model that learns the table reaches the entropy floor
// ln(kSuccessors) ≈ 1.386 nats per token (from ln V = 5.545 for V = 256); a bigram model suffices, so a
// tiny GPT gets there in a few hundred steps.
//
// Classes: Gaussian clusters. Class c has a centre μ_c ~ N(0, I) in the flattened input space; a sample is
// μ_c + σ·N(0, I) with σ = sqrt(2F) / 5 for F features, so neighbouring centres are about 2.5 σ apart along
// the line joining them: learnable, not trivially separable (a few percent Bayes error with 10 classes).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/train/data/data_source.hpp"

namespace cleave::train {

class SyntheticTokenSource final : public DataSource {
 public:
  static constexpr std::int64_t kSuccessors = 4;

  SyntheticTokenSource(std::int64_t vocab_size, std::int64_t seq_len, std::uint64_t seed, Split split);

  std::string describe() const override;
  Shape sample_shape() const override { return Shape{seq_len_}; }
  DType input_dtype() const override { return DType::kI32; }
  Shape target_shape() const override { return Shape{seq_len_}; }

  // Cross-entropy per token of the ideal predictor (ln of the successor count; no prediction for the first
  // token is needed since every target has a predecessor).
  double entropy_floor() const;
  // The successors of token v (for tests).
  const std::int32_t* successors(std::int64_t v) const { return successors_.data() + v * branching_; }
  std::int64_t branching() const { return branching_; }

 private:
  void write_sample(std::uint64_t id, void* input, std::int32_t* target) const override;

  std::int64_t vocab_size_;
  std::int64_t seq_len_;
  std::int64_t branching_;
  std::vector<std::int32_t> successors_;  // vocab × branching
  Split split_;
};

class SyntheticClassSource final : public DataSource {
 public:
  SyntheticClassSource(const Shape& sample_shape, std::int64_t num_classes, std::uint64_t seed, Split split);

  std::string describe() const override;
  Shape sample_shape() const override { return shape_; }
  DType input_dtype() const override { return DType::kF32; }
  Shape target_shape() const override { return Shape{}; }

  const float* centre(std::int64_t c) const { return centres_.data() + c * shape_.numel(); }

 private:
  void write_sample(std::uint64_t id, void* input, std::int32_t* target) const override;

  Shape shape_;
  std::int64_t num_classes_;
  float sigma_;
  std::vector<float> centres_;  // classes × features
  Split split_;
};

}  // namespace cleave::train
