// config -> DataSource (see make_data_source.hpp).
#include "engine/train/data/make_data_source.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "engine/train/data/digits.hpp"
#include "engine/train/data/synthetic.hpp"
#include "engine/train/data/token_source.hpp"

namespace cleave::train {
namespace {

std::string percent(double fraction) { return fmt::format("{:.4g}%", 100.0 * fraction); }

std::unique_ptr<DataSource> make_token_source(const config::RunConfig& c, Split split) {
  const auto& d = c.data;
  const TokenFormat format =
      d.type == config::DataType::kText
          ? TokenFormat::kText
          : (d.format == config::TokenFileFormat::kUint16 ? TokenFormat::kUint16 : TokenFormat::kLlmc);
  const bool separate_eval = !d.val_path.empty();
  const std::string& path = split == Split::kEval && separate_eval ? d.val_path : d.path;
  auto file = std::make_shared<const TokenFile>(path, format);
  const std::int64_t n = file->size();
  std::int64_t begin = 0, end = n;
  std::string region = "whole file";
  if (!separate_eval) {
    const auto held_out = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * d.val_fraction));
    if (split == Split::kTrain) {
      end = n - held_out;
      if (held_out > 0) region = fmt::format("first {} of {} tokens", percent(1.0 - d.val_fraction), n);
    } else {
      CLEAVE_CHECK(d.val_fraction > 0.0, "data: no evaluation split (data.val_fraction is 0 and data.val_path is empty)");
      begin = n - held_out;
      region = fmt::format("last {} = data.val_fraction of {} tokens", percent(d.val_fraction), n);
    }
  }
  const std::int64_t vocab = config::token_vocab_size(c.model);
  if (end - begin > 0) {
    const auto [max_token, position] = file->max_token(begin, end);
    CLEAVE_CHECK(max_token < vocab,
                 "data file {}: token {} at position {} is ≥ model.vocab_size {} (the file needs a vocabulary of at "
                 "least {})",
                 path, max_token, position, vocab, max_token + 1);
  }
  return std::make_unique<TokenWindowSource>(std::move(file), begin, end, config::token_seq_len(c.model), c.train.seed, split,
                                             region);
}

std::unique_ptr<DataSource> make_digits_source(const config::RunConfig& c, Split split) {
  auto data = std::make_shared<const DigitsData>(read_digits(c.data.path));
  const std::int64_t rows = data->rows();
  const auto test_rows = static_cast<std::int64_t>(std::floor(static_cast<double>(rows) * c.data.val_fraction));
  CLEAVE_CHECK(split == Split::kTrain || test_rows > 0,
               "data file {}: the test split (last {} of {} rows) is empty; raise data.val_fraction", c.data.path,
               percent(c.data.val_fraction), rows);
  const std::int64_t begin = split == Split::kTrain ? 0 : rows - test_rows;
  const std::int64_t end = split == Split::kTrain ? rows - test_rows : rows;
  // Images [1, 8, 8] for a family whose sample is an image (cnn), flat [64] otherwise (validate.cpp checked which).
  const bool images = partition::family(c.model.type).classifier(c.model).sample.rank() == 3;
  return std::make_unique<DigitsSource>(std::move(data), begin, end, images, c.train.seed, split);
}

}  // namespace

std::unique_ptr<DataSource> make_data_source(const config::RunConfig& c, Split split) {
  using config::DataType;
  const DataType type = c.data.type;
  if (type == DataType::kSynthetic) {
    if (partition::is_language_model(c.model.type)) {
      return std::make_unique<SyntheticTokenSource>(config::token_vocab_size(c.model), config::token_seq_len(c.model),
                                                    c.train.seed, split);
    }
    const auto classifier = partition::family(c.model.type).classifier;
    CLEAVE_ASSERT(classifier != nullptr, "model.type {} is neither a language model nor a classifier", c.model.type);
    const partition::Family::ClassifierSizes sizes = classifier(c.model);
    return std::make_unique<SyntheticClassSource>(sizes.sample, sizes.classes, c.train.seed, split);
  }
  if (type == DataType::kText || type == DataType::kTokens) {
    CLEAVE_CHECK(partition::is_language_model(c.model.type), "data.type \"{}\" needs model.type {} (model.type is \"{}\")",
                 type, partition::family_names([](const partition::Family& f) { return f.language_model; }, "or", true),
                 c.model.type);
    CLEAVE_CHECK(!c.data.path.empty(), "data.path: missing; required for data.type \"{}\"", type);
    return make_token_source(c, split);
  }
  if (type == DataType::kDigits) {
    const auto reads_digits = [](const partition::Family& f) { return f.check_digits_input != nullptr; };
    CLEAVE_CHECK(reads_digits(partition::family(c.model.type)),
                 "data.type \"digits\" needs model.type {} (model.type is \"{}\")",
                 partition::family_names(reads_digits, "or", true), c.model.type);
    return make_digits_source(c, split);
  }
  CLEAVE_THROW("data.type: unknown DataType {}", static_cast<int>(type));
}

}  // namespace cleave::train
