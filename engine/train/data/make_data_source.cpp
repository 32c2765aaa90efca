// config -> DataSource (see make_data_source.hpp).
#include "engine/train/data/make_data_source.hpp"

#include <glob.h>

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/data/digits.hpp"
#include "engine/train/data/synthetic.hpp"
#include "engine/train/data/token_blend_source.hpp"
#include "engine/train/data/token_manifest.hpp"
#include "engine/train/data/token_source.hpp"

namespace cleave::train {
namespace {

std::string percent(double fraction) { return fmt::format("{:.4g}%", 100.0 * fraction); }

bool is_glob(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

// The files an entry of data.paths names: itself, or its glob's matches in sorted order. Throws naming the
// entry when a glob matches nothing.
std::vector<std::string> expand(const std::string& entry, const std::string& key) {
  if (!is_glob(entry)) return {entry};
  glob_t found{};
  const int rc = ::glob(entry.c_str(), GLOB_ERR, nullptr, &found);
  std::vector<std::string> files;
  for (std::size_t i = 0; rc == 0 && i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  CLEAVE_CHECK_INPUT(!files.empty(), "{}: the glob \"{}\" matches no file{}; check the directory and pattern (a relative "
               "path in a config file is relative to the config file's directory)", key, entry,
               rc == GLOB_ABORTED ? " (a directory could not be read)" : "");
  std::sort(files.begin(), files.end());
  return files;
}

// manifest.json beside a shard (written by cleave tokenize) names the tokenizer's vocabulary: a model whose
// vocab_size is smaller cannot embed the ids, which is refused here before the shard is scanned.
void check_manifest_vocab(const std::string& shard, std::int64_t vocab) {
  const auto found = manifest_for_shard(shard);
  if (!found) return;
  const auto& [path, manifest] = *found;
  CLEAVE_CHECK_INPUT(manifest.vocab_size <= vocab,
               "data file {}: written by the tokenizer {} with a vocabulary of {} ids ({}), but model.vocab_size is {}; "
               "set model.vocab_size to at least {} (or tokenize with the model's own tokenizer)", shard,
               manifest.tokenizer, manifest.vocab_size, path, vocab, manifest.vocab_size);
}

void check_region_vocab(const TokenFile& file, std::int64_t begin, std::int64_t end, std::int64_t vocab) {
  if (end - begin <= 0) return;
  const auto [max_token, position] = file.max_token(begin, end);
  CLEAVE_CHECK_INPUT(max_token < vocab,
               "data file {}: token {} at position {} is ≥ model.vocab_size {} (the file needs a vocabulary of at "
               "least {})",
               file.path(), max_token, position, vocab, max_token + 1);
}

TokenFormat token_format(const config::DataConfig& d) {
  return d.type == config::DataType::kText
             ? TokenFormat::kText
             : (d.format == config::TokenFileFormat::kUint16 ? TokenFormat::kUint16 : TokenFormat::kLlmc);
}

// data.paths: each entry one source of shards; the train split is the first 1 - val_fraction of each shard,
// the eval split the rest, or data.val_path (a file or a glob) as one source.
std::unique_ptr<DataSource> make_blend_source(const config::RunConfig& c, Split split) {
  const auto& d = c.data;
  const std::int64_t vocab = config::token_vocab_size(c.model);
  const TokenFormat format = token_format(d);
  // Every entry is expanded (so a glob matching nothing is refused) before any file is opened.
  std::vector<std::pair<std::string, std::vector<std::string>>> entries;
  const bool separate_eval = split == Split::kEval && !d.val_path.empty();
  if (separate_eval) {
    entries.emplace_back(d.val_path, expand(d.val_path, "data.val_path"));
  } else {
    for (std::size_t i = 0; i < d.paths.size(); ++i) {
      entries.emplace_back(d.paths[i], expand(d.paths[i], fmt::format("data.paths[{}]", i)));
    }
  }
  for (const auto& entry : entries) {
    for (const std::string& file : entry.second) check_manifest_vocab(file, vocab);
  }
  CLEAVE_CHECK_INPUT(split == Split::kTrain || separate_eval || d.val_fraction > 0.0,
               "data: no evaluation split (data.val_fraction is 0 and data.val_path is empty)");
  std::vector<TokenBlendInput> inputs;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    TokenBlendInput in;
    in.name = entries[i].first;
    in.weight = separate_eval || d.weights.empty() ? 0.0 : d.weights[i];
    for (const std::string& path : entries[i].second) {
      auto file = std::make_shared<const TokenFile>(path, format);
      const std::int64_t n = file->size();
      const auto held_out =
          !d.val_path.empty() ? 0 : static_cast<std::int64_t>(std::floor(static_cast<double>(n) * d.val_fraction));
      const std::int64_t begin = split == Split::kTrain || separate_eval ? 0 : n - held_out;
      const std::int64_t end = split == Split::kTrain ? n - held_out : n;
      check_region_vocab(*file, begin, end, vocab);
      // No weights: each source weighs its windows, so every window of every shard is equally likely.
      const std::int64_t windows = std::max<std::int64_t>(0, end - begin - config::token_seq_len(c.model));
      in.weight += separate_eval || d.weights.empty() ? static_cast<double>(windows) : 0.0;
      in.regions.push_back({std::move(file), begin, end});
    }
    inputs.push_back(std::move(in));
  }
  return std::make_unique<TokenBlendSource>(std::move(inputs), config::token_seq_len(c.model), c.train.seed, split);
}

std::unique_ptr<DataSource> make_token_source(const config::RunConfig& c, Split split) {
  const auto& d = c.data;
  if (!d.paths.empty()) return make_blend_source(c, split);
  const TokenFormat format = token_format(d);
  const bool separate_eval = !d.val_path.empty();
  const std::string& path = split == Split::kEval && separate_eval ? d.val_path : d.path;
  if (format == TokenFormat::kLlmc) check_manifest_vocab(path, config::token_vocab_size(c.model));
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
      CLEAVE_CHECK_INPUT(d.val_fraction > 0.0, "data: no evaluation split (data.val_fraction is 0 and data.val_path is empty)");
      begin = n - held_out;
      region = fmt::format("last {} = data.val_fraction of {} tokens", percent(d.val_fraction), n);
    }
  }
  check_region_vocab(*file, begin, end, config::token_vocab_size(c.model));
  return std::make_unique<TokenWindowSource>(std::move(file), begin, end, config::token_seq_len(c.model), c.train.seed, split,
                                             region);
}

std::unique_ptr<DataSource> make_digits_source(const config::RunConfig& c, Split split) {
  auto data = std::make_shared<const DigitsData>(read_digits(c.data.path));
  const std::int64_t rows = data->rows();
  const auto test_rows = static_cast<std::int64_t>(std::floor(static_cast<double>(rows) * c.data.val_fraction));
  CLEAVE_CHECK_INPUT(split == Split::kTrain || test_rows > 0,
               "data file {}: the test split (last {} of {} rows) is empty; raise data.val_fraction", c.data.path,
               percent(c.data.val_fraction), rows);
  const std::int64_t begin = split == Split::kTrain ? 0 : rows - test_rows;
  const std::int64_t end = split == Split::kTrain ? rows - test_rows : rows;
  // Images [1, 8, 8] for a family whose sample is an image (cnn), flat [64] otherwise (validate.cpp checked which).
  const bool images = partition::family(c.model.type).classifier(c.model).sample.rank() == 3;
  return std::make_unique<DigitsSource>(std::move(data), begin, end, images, c.train.seed, split);
}

}  // namespace

void check_data_files(const config::RunConfig& c) {
  const auto& d = c.data;
  if (d.type == config::DataType::kDigits) {
    (void)read_digits(d.path);
    return;
  }
  if (d.type != config::DataType::kText && d.type != config::DataType::kTokens) return;
  const TokenFormat format = token_format(d);
  std::vector<std::string> files;
  if (d.paths.empty()) {
    files.push_back(d.path);
  } else {
    for (std::size_t i = 0; i < d.paths.size(); ++i) {
      for (std::string& file : expand(d.paths[i], fmt::format("data.paths[{}]", i))) files.push_back(std::move(file));
    }
  }
  if (!d.val_path.empty() && c.train.eval_batches > 0) {
    if (d.paths.empty()) files.push_back(d.val_path);
    else for (std::string& file : expand(d.val_path, "data.val_path")) files.push_back(std::move(file));
  }
  const std::int64_t vocab = config::token_vocab_size(c.model);
  for (const std::string& file : files) {
    if (format == TokenFormat::kLlmc) check_manifest_vocab(file, vocab);
    const TokenFile opened(file, format);  // maps the file and checks its header; no token is read
  }
}

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
    CLEAVE_CHECK(!c.data.path.empty() || !c.data.paths.empty(), "data.path: missing; required for data.type \"{}\"", type);
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
