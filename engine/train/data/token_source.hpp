// Random windows of seq_len + 1 consecutive tokens from a region of a token file (nanoGPT / llm.c style):
// inputs are tokens [o, o + T), targets [o + 1, o + T + 1), o drawn uniformly from the region.
#pragma once

#include <memory>
#include <string>

#include "engine/train/data/data_source.hpp"
#include "engine/train/data/token_file.hpp"

namespace cleave::train {

class TokenWindowSource final : public DataSource {
 public:
  // Tokens [begin, end) of `file`; `region` describes them for messages ("first 90%", "whole file").
  // Throws Error naming the file and the numbers when the region holds fewer than seq_len + 1 tokens.
  TokenWindowSource(std::shared_ptr<const TokenFile> file, std::int64_t begin, std::int64_t end,
                    std::int64_t seq_len, std::uint64_t seed, Split split, std::string region);

  std::string describe() const override;
  Shape sample_shape() const override { return Shape{seq_len_}; }
  DType input_dtype() const override { return DType::kI32; }
  Shape target_shape() const override { return Shape{seq_len_}; }

 private:
  void write_sample(std::uint64_t id, void* input, std::int32_t* target) const override;

  std::shared_ptr<const TokenFile> file_;
  std::int64_t begin_;
  std::int64_t end_;
  std::int64_t seq_len_;
  Split split_;
  std::string region_;
};

}  // namespace cleave::train
