// manifest.json reading and writing (see token_manifest.hpp).
#include "engine/train/data/token_manifest.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;

json shards_json(const std::vector<TokenManifest::Shard>& shards) {
  json out = json::array();
  for (const auto& s : shards) out.push_back({{"path", s.path}, {"tokens", s.tokens}});
  return out;
}

}  // namespace

void write_token_manifest(const std::string& path, const TokenManifest& m) {
  CLEAVE_CHECK(!std::filesystem::exists(path), "token manifest {}: already exists; not overwriting it", path);
  const json j = {{"format", "llm.c token shards"},
                  {"bits", m.bits},
                  {"tokenizer", m.tokenizer},
                  {"tokenizer_description", m.tokenizer_description},
                  {"vocab_size", m.vocab_size},
                  {"documents", m.documents},
                  {"document_template", m.document_template},
                  {"train", shards_json(m.train)},
                  {"val", shards_json(m.val)}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    CLEAVE_CHECK(out.good(), "token manifest {}: cannot create {}", path, tmp);
    out << j.dump(2) << "\n";
    CLEAVE_CHECK(out.good(), "token manifest {}: writing {} failed", path, tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    CLEAVE_THROW("token manifest {}: cannot rename {} to it ({})", path, tmp, ec.message());
  }
}

TokenManifest read_token_manifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CLEAVE_CHECK(in.good(), "token manifest {}: cannot open it for reading", path);
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    CLEAVE_THROW("token manifest {}: not valid JSON ({})", path, e.what());
  }
  TokenManifest m;
  try {
    m.bits = j.at("bits").get<int>();
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.tokenizer_description = j.value("tokenizer_description", "");
    m.vocab_size = j.at("vocab_size").get<std::int64_t>();
    m.documents = j.value("documents", std::int64_t{0});
    m.document_template = j.value("document_template", "");
    for (const char* split : {"train", "val"}) {
      for (const json& s : j.at(split)) {
        (std::string_view(split) == "train" ? m.train : m.val)
            .push_back({s.at("path").get<std::string>(), s.at("tokens").get<std::int64_t>()});
      }
    }
  } catch (const json::exception& e) {
    CLEAVE_THROW("token manifest {}: {} (expected the keys cleave tokenize writes: bits, tokenizer, vocab_size, "
                 "train, val)", path, e.what());
  }
  return m;
}

std::optional<std::pair<std::string, TokenManifest>> manifest_for_shard(const std::string& shard_path) {
  const std::filesystem::path shard(shard_path);
  const std::string path = (shard.parent_path() / "manifest.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  TokenManifest m = read_token_manifest(path);
  const std::string name = shard.filename().string();
  for (const auto* list : {&m.train, &m.val}) {
    for (const auto& s : *list) {
      if (s.path == name) return std::make_pair(path, std::move(m));
    }
  }
  return std::nullopt;
}

}  // namespace cleave::train
