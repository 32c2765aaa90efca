// See init_tokenizer_check.hpp.
#include "engine/cli/init_tokenizer_check.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/train/data/token_manifest.hpp"

namespace cleave::cli {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

void check_shards_match_source_tokenizer(const config::RunConfig& config, const train::WeightSource& source) {
  if (config.data.type != config::DataType::kTokens) return;
  const std::string from = source.source.is_object() ? source.source.value("path", std::string()) : std::string();
  if (from.empty()) return;
  const fs::path own = fs::path(from) / "tokenizer.json";
  if (!fs::is_regular_file(own)) return;
  std::vector<std::string> files = {config.data.path, config.data.val_path};
  for (const std::string& p : config.data.paths) {
    if (p.find_first_of("*?[") == std::string::npos) files.push_back(p);
  }
  std::optional<std::string> own_bytes;
  std::optional<tokenizer::Tokenizer> own_tokenizer;  // parsed only when the bytes differ
  for (const std::string& file : files) {
    if (file.empty() || !fs::is_regular_file(file)) continue;  // the data loader names a missing file
    const auto found = train::manifest_for_shard(file);
    if (!found) continue;
    const train::TokenManifest& m = found->second;
    if (!own_bytes) own_bytes = file_bytes(own).value_or("");
    if (file_bytes(m.tokenizer) == own_bytes) continue;
    if (!own_tokenizer) {
      try {
        own_tokenizer.emplace(tokenizer::read_tokenizer_json(own.string()));
      } catch (const Error&) {
        return;  // a tokenizer.json this reader cannot read is no evidence either way; the run does not read it
      }
    }
    if (own_tokenizer->vocab_size() == m.vocab_size && own_tokenizer->describe() == m.tokenizer_description) continue;
    throw InputError(fmt::format(
        "train --init-from: data file {} was tokenized with {} ({}; {}), but the weights in {} read the ids of their "
        "own tokenizer {} ({}): those ids are other tokens to this model; nothing was written. Tokenize the text with "
        "the model's tokenizer: cleave tokenize FILES --tokenizer {} --out DIR, then --set data.path=DIR/train.bin",
        file, m.tokenizer, m.tokenizer_description, found->first, from, own.string(), own_tokenizer->describe(),
        own.string()));
  }
}

}  // namespace cleave::cli
