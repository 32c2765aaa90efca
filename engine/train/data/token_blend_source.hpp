// Windows of seq_len + 1 tokens from several sources of token shards, blended by weight (Megatron-LM's
// BlendedDataset: a sample comes from source s with probability w_s / Σw), each source a list of shard regions.
//
// Invariants (with data_source.hpp's): sample `id` (a 64-bit draw fixed by seed, split, step and index) picks
// its source from a second draw keyed by the id, then window id mod W_s of that source (W_s = the source's
// windows counted over its shards in order) — so the order depends on the seed and the shard list, never on
// the parallel layout. A window never crosses a shard boundary. With one source this is uniform over all
// windows of all shards, and with one shard the very windows TokenWindowSource draws for the same ids.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/train/data/data_source.hpp"
#include "engine/train/data/token_file.hpp"

namespace cleave::train {

struct TokenRegion {
  std::shared_ptr<const TokenFile> file;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

struct TokenBlendInput {
  std::string name;  // for describe(): the data.paths entry
  double weight = 1;
  std::vector<TokenRegion> regions;  // regions shorter than seq_len + 1 tokens hold no window
};

class TokenBlendSource final : public DataSource {
 public:
  // Throws Error naming the source when none of its regions holds a window of seq_len + 1 tokens.
  TokenBlendSource(std::vector<TokenBlendInput> sources, std::int64_t seq_len, std::uint64_t seed, Split split);

  std::string describe() const override;
  Shape sample_shape() const override { return Shape{seq_len_}; }
  DType input_dtype() const override { return DType::kI32; }
  Shape target_shape() const override { return Shape{seq_len_}; }

 private:
  void write_sample(std::uint64_t id, void* input, std::int32_t* target) const override;

  struct Source {
    TokenBlendInput input;
    std::vector<std::int64_t> window_ends;  // cumulative windows after each region
    std::int64_t tokens = 0;
  };
  std::vector<Source> sources_;
  std::vector<double> cumulative_;  // normalised cumulative weights; back() == 1
  std::int64_t seq_len_;
  std::uint64_t seed_;
  std::uint64_t blend_key_;
  Split split_;
};

}  // namespace cleave::train
