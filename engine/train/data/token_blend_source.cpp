// Blended token windows (see token_blend_source.hpp).
#include "engine/train/data/token_blend_source.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/rng.hpp"

namespace cleave::train {

TokenBlendSource::TokenBlendSource(std::vector<TokenBlendInput> sources, std::int64_t seq_len, std::uint64_t seed,
                                   Split split)
    : DataSource(seed, split_name(split)),
      seq_len_(seq_len),
      seed_(seed),
      blend_key_(rng::hash_key(std::string("data.blend.") + std::string(split_name(split)))),
      split_(split) {
  CLEAVE_ASSERT(!sources.empty() && seq_len >= 1, "TokenBlendSource: {} sources, seq_len {}", sources.size(), seq_len);
  double total = 0;
  for (TokenBlendInput& in : sources) {
    Source s;
    std::int64_t windows = 0;
    for (const TokenRegion& r : in.regions) {
      windows += std::max<std::int64_t>(0, r.end - r.begin - seq_len);
      s.window_ends.push_back(windows);
      s.tokens += r.end - r.begin;
    }
    CLEAVE_CHECK_INPUT(windows > 0,
                 "data.paths entry {}: the {} split of its {} shard{} ({} tokens) holds no window of model.seq_len + 1 "
                 "= {} tokens in any one shard (windows do not cross shards); use fewer, larger shards or a shorter "
                 "seq_len", in.name, split_name(split), in.regions.size(), in.regions.size() == 1 ? "" : "s", s.tokens,
                 seq_len + 1);
    total += in.weight;
    s.input = std::move(in);
    sources_.push_back(std::move(s));
  }
  CLEAVE_ASSERT(total > 0, "TokenBlendSource: weights sum to {}", total);
  double running = 0;
  for (const Source& s : sources_) cumulative_.push_back((running += s.input.weight) / total);
  cumulative_.back() = 1.0;
}

std::string TokenBlendSource::describe() const {
  std::string out = fmt::format("{} split of {} source{}:", split_name(split_), sources_.size(), sources_.size() == 1 ? "" : "s");
  double previous = 0;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const Source& s = sources_[i];
    out += fmt::format(" {} (weight {:.4g}, {} shard{}, {} tokens, {} windows){}", s.input.name, cumulative_[i] - previous,
                       s.input.regions.size(), s.input.regions.size() == 1 ? "" : "s", s.tokens, s.window_ends.back(),
                       i + 1 < sources_.size() ? ";" : "");
    previous = cumulative_[i];
  }
  return out;
}

void TokenBlendSource::write_sample(std::uint64_t id, void* input, std::int32_t* target) const {
  std::size_t source = 0;
  if (sources_.size() > 1) {
    // 53 random bits as a double in [0, 1): a draw independent of id mod W below.
    const double u = static_cast<double>(rng::bits64(seed_, blend_key_, id) >> 11) * 0x1.0p-53;
    source = static_cast<std::size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    source = std::min(source, sources_.size() - 1);
  }
  const Source& s = sources_[source];
  const auto window = static_cast<std::int64_t>(id % static_cast<std::uint64_t>(s.window_ends.back()));
  const auto region = static_cast<std::size_t>(std::upper_bound(s.window_ends.begin(), s.window_ends.end(), window) -
                                               s.window_ends.begin());
  const TokenRegion& r = s.input.regions[region];
  const std::int64_t offset = r.begin + window - (region == 0 ? 0 : s.window_ends[region - 1]);
  auto* tokens = static_cast<std::int32_t*>(input);
  for (std::int64_t t = 0; t < seq_len_; ++t) {
    tokens[t] = r.file->at(offset + t);
    target[t] = r.file->at(offset + t + 1);
  }
}

}  // namespace cleave::train
