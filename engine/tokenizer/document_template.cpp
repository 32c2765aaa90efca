// BOS/EOS per document (see document_template.hpp).
#include "engine/tokenizer/document_template.hpp"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::tokenizer {
namespace {

using nlohmann::json;

std::string names(const Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::int32_t id : ids) out += fmt::format("{}{} ({})", out.empty() ? "" : " ", tok.token_bytes(id), id);
  return out.empty() ? "nothing" : out;
}

// bos_token / eos_token: a string or an AddedToken object {"content": ...}.
std::int32_t special_id(const Tokenizer& tok, const json& config, const char* key, const std::string& path) {
  const auto it = config.find(key);
  CLEAVE_CHECK(it != config.end() && !it->is_null(),
               "{}: {} is missing, but add_{} is true; name the token (e.g. \"{}\": \"<s>\") or set add_{} false",
               path, key, key, key, key);
  const json& value = it->is_object() && it->contains("content") ? (*it)["content"] : *it;
  CLEAVE_CHECK(value.is_string(), "{}: {} is {}; expected a token (a string or {{\"content\": ...}})", path, key,
               it->dump());
  const auto id = tok.added_token_id(value.get<std::string>());
  CLEAVE_CHECK(id.has_value(), "{}: {} \"{}\" is not an added token of {}; the two files disagree", path, key,
               value.get<std::string>(), tok.source());
  return *id;
}

}  // namespace

DocumentTemplate document_template(const Tokenizer& tok, const std::string& config_json, const std::string& config_path) {
  DocumentTemplate t;
  if (!config_json.empty()) {
    json config;
    try {
      config = json::parse(config_json);
    } catch (const json::exception& e) {
      CLEAVE_THROW("{}: not valid JSON ({})", config_path, e.what());
    }
    CLEAVE_CHECK(config.is_object(), "{}: expected a JSON object", config_path);
    const auto flag = [&](const char* key) -> std::optional<bool> {
      const auto it = config.find(key);
      if (it == config.end() || it->is_null()) return std::nullopt;
      CLEAVE_CHECK(it->is_boolean(), "{}: {} is {}; expected true or false", config_path, key, it->dump());
      return it->get<bool>();
    };
    const auto bos = flag("add_bos_token");
    const auto eos = flag("add_eos_token");
    if (bos || eos) {
      const bool add_bos = bos.value_or(true), add_eos = eos.value_or(false);
      if (add_bos) t.before.push_back(special_id(tok, config, "bos_token", config_path));
      if (add_eos) t.after.push_back(special_id(tok, config, "eos_token", config_path));
      t.source = fmt::format("{} (add_bos_token {}, add_eos_token {}): {} before, {} after each document", config_path,
                             add_bos, add_eos, names(tok, t.before), names(tok, t.after));
      return t;
    }
  }
  t.before = tok.template_prefix();
  t.after = tok.template_suffix();
  t.source = fmt::format("{} post_processor: {} before, {} after each document", tok.source(), names(tok, t.before),
                         names(tok, t.after));
  return t;
}

DocumentTemplate read_document_template(const Tokenizer& tok, const std::string& tokenizer_path) {
  const std::string path = (std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return document_template(tok, "", path);
  std::ifstream file(path, std::ios::binary);
  CLEAVE_CHECK(file.good(), "{}: cannot open it for reading", path);
  std::ostringstream text;
  text << file.rdbuf();
  return document_template(tok, text.str(), path);
}

}  // namespace cleave::tokenizer
