// Token windows (see token_source.hpp).
#include "engine/train/data/token_source.hpp"

#include <string>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::train {
namespace {

// What makes a split of n tokens serve: a shorter window, more text, or (evaluation) a larger split or none.
std::string short_split_fix(Split split, std::int64_t n) {
  const std::string shorter = n >= 2 ? fmt::format("lower model.seq_len to at most {}, or ", n - 1) : std::string();
  if (split == Split::kTrain) return shorter + "give more text";
  return shorter + "raise data.val_fraction or give a longer data.val_path, or set train.eval_batches=0 (no evaluation)";
}

}  // namespace

TokenWindowSource::TokenWindowSource(std::shared_ptr<const TokenFile> file, std::int64_t begin, std::int64_t end,
                                     std::int64_t seq_len, std::uint64_t seed, Split split, std::string region)
    : DataSource(seed, split_name(split)),
      file_(std::move(file)),
      begin_(begin),
      end_(end),
      seq_len_(seq_len),
      split_(split),
      region_(std::move(region)) {
  CLEAVE_ASSERT(0 <= begin && begin <= end && end <= file_->size() && seq_len >= 1, "token region [{}, {}) of {}",
                begin, end, file_->size());
  const std::int64_t n = end - begin;
  CLEAVE_CHECK_INPUT(n >= seq_len + 1,
               "data file {}: the {} split ({}) has {} tokens, but model.seq_len {} needs at least {} (seq_len + 1); {}",
               file_->path(), split_name(split), region_, n, seq_len, seq_len + 1, short_split_fix(split, n));
}

std::string TokenWindowSource::describe() const {
  return fmt::format("{} {}: {} split, tokens [{}, {}) of {} ({})", token_format_name(file_->format()), file_->path(),
                     split_name(split_), begin_, end_, file_->size(), region_);
}

void TokenWindowSource::write_sample(std::uint64_t id, void* input, std::int32_t* target) const {
  const auto windows = static_cast<std::uint64_t>(end_ - begin_ - seq_len_);  // start offsets in the region
  const std::int64_t offset = begin_ + static_cast<std::int64_t>(id % windows);
  auto* tokens = static_cast<std::int32_t*>(input);
  for (std::int64_t t = 0; t < seq_len_; ++t) {
    tokens[t] = file_->at(offset + t);
    target[t] = file_->at(offset + t + 1);
  }
}

}  // namespace cleave::train
