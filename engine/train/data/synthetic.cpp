// Synthetic tasks (see synthetic.hpp).
#include "engine/train/data/synthetic.hpp"

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"

namespace cleave::train {
namespace {

// Fixed: the task is the same for every train.seed.
constexpr std::uint64_t kTaskSeed = 0x5eed7a5cull;

}  // namespace

SyntheticTokenSource::SyntheticTokenSource(std::int64_t vocab_size, std::int64_t seq_len, std::uint64_t seed,
                                           Split split)
    : DataSource(seed, std::string("synthetic.") + std::string(split_name(split))),
      vocab_size_(vocab_size),
      seq_len_(seq_len),
      branching_(std::min(kSuccessors, vocab_size)),
      split_(split) {
  CLEAVE_CHECK(vocab_size >= 2 && seq_len >= 1, "synthetic tokens: model.vocab_size {} must be ≥ 2 and seq_len {} ≥ 1",
               vocab_size, seq_len);
  successors_.resize(static_cast<std::size_t>(vocab_size * branching_));
  const std::uint64_t key = rng::hash_key("synthetic.successors");
  for (std::int64_t v = 0; v < vocab_size; ++v) {
    // Distinct successors per token, so the floor is exactly ln(branching).
    std::int32_t* out = successors_.data() + v * branching_;
    std::uint64_t draw = 0;
    for (std::int64_t k = 0; k < branching_; ++k) {
      std::int32_t candidate;
      do {
        candidate = static_cast<std::int32_t>(
            rng::bits64(kTaskSeed, key, static_cast<std::uint64_t>(v) * 1024 + draw++) %
            static_cast<std::uint64_t>(vocab_size));
      } while (std::find(out, out + k, candidate) != out + k);
      out[k] = candidate;
    }
  }
}

double SyntheticTokenSource::entropy_floor() const { return std::log(static_cast<double>(branching_)); }

std::string SyntheticTokenSource::describe() const {
  return fmt::format("synthetic tokens: {} split, Markov chain over {} tokens with {} successors each (loss floor "
                     "{:.3f} nats, ln V = {:.3f}), seq_len {}",
                     split_name(split_), vocab_size_, branching_, entropy_floor(),
                     std::log(static_cast<double>(vocab_size_)), seq_len_);
}

void SyntheticTokenSource::write_sample(std::uint64_t id, void* input, std::int32_t* target) const {
  auto* tokens = static_cast<std::int32_t*>(input);
  const std::uint64_t key = rng::hash_key("synthetic.walk");
  std::int32_t current =
      static_cast<std::int32_t>(rng::bits64(id, key, 0) % static_cast<std::uint64_t>(vocab_size_));
  for (std::int64_t t = 0; t < seq_len_; ++t) {
    tokens[t] = current;
    const auto choice = rng::bits64(id, key, static_cast<std::uint64_t>(t + 1)) % static_cast<std::uint64_t>(branching_);
    current = successors(current)[choice];
    target[t] = current;
  }
}

SyntheticClassSource::SyntheticClassSource(const Shape& sample_shape, std::int64_t num_classes, std::uint64_t seed,
                                           Split split)
    : DataSource(seed, std::string("synthetic.") + std::string(split_name(split))),
      shape_(sample_shape),
      num_classes_(num_classes),
      split_(split) {
  const std::int64_t features = shape_.numel();
  CLEAVE_CHECK(num_classes >= 2 && features >= 1, "synthetic classes: {} classes of {} features", num_classes,
               features);
  sigma_ = static_cast<float>(std::sqrt(2.0 * static_cast<double>(features)) / 5.0);
  centres_.resize(static_cast<std::size_t>(num_classes * features));
  rng::fill_normal(centres_.data(), num_classes * features, kTaskSeed, rng::hash_key("synthetic.centres"), 0.0f, 1.0f);
}

std::string SyntheticClassSource::describe() const {
  return fmt::format("synthetic classes: {} split, {} Gaussian clusters in {} (σ = {:.3f})", split_name(split_),
                     num_classes_, shape_.str(), sigma_);
}

void SyntheticClassSource::write_sample(std::uint64_t id, void* input, std::int32_t* target) const {
  const std::int64_t features = shape_.numel();
  const auto label = static_cast<std::int64_t>(id % static_cast<std::uint64_t>(num_classes_));
  auto* x = static_cast<float*>(input);
  // Noise keyed by the draw itself: the same sample id always gives the same image.
  rng::fill_normal(x, features, id, rng::hash_key("synthetic.noise"), 0.0f, sigma_);
  const float* mu = centre(label);
  for (std::int64_t f = 0; f < features; ++f) x[f] += mu[f];
  *target = static_cast<std::int32_t>(label);
}

}  // namespace cleave::train
