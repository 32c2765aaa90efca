// tokenizer.json -> TokenizerSpec (see tokenizer_json.hpp): the file, its model (vocabulary and merges) and added
// tokens here; each other section has a reader of its own (tokenizer_json_parts.hpp). Every refusal says what is
// supported.
#include "engine/tokenizer/tokenizer_json.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/tokenizer/tokenizer_json_parts.hpp"

namespace cleave::tokenizer {
namespace {

using json_parts::flag;
using json_parts::json;
using json_parts::kSupported;
using json_parts::member;
using json_parts::read_decoder;
using json_parts::read_normalizer;
using json_parts::read_post_processor;
using json_parts::read_pre_tokenizer;
using json_parts::shown;
using json_parts::type_of;

void read_model(const json& model, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const std::string type = type_of(model, "model", src);
  CLEAVE_CHECK(type == "BPE", "{}: model.type is \"{}\"; {}", src, type, kSupported);
  const auto dropout = model.find("dropout");
  CLEAVE_CHECK(dropout == model.end() || dropout->is_null() || (dropout->is_number() && dropout->get<double>() == 0.0),
               "{}: model.dropout is {}; cleave encodes without BPE dropout (set it to null)", src, shown(*dropout));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    CLEAVE_CHECK(it == model.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
                 "{}: model.{} is {}; byte-level BPE has none (null). {}", src, key, shown(*it), kSupported);
  }
  spec.byte_fallback = flag(model, "byte_fallback", false, "model", src);
  spec.fuse_unk = flag(model, "fuse_unk", false, "model", src);
  if (const auto unk = model.find("unk_token"); unk != model.end() && !unk->is_null()) {
    CLEAVE_CHECK(unk->is_string(), "{}: model.unk_token is {}; expected a string or null", src, shown(*unk));
    spec.unk_token = unk->get<std::string>();
  }
  spec.ignore_merges = flag(model, "ignore_merges", false, "model", src);

  const json& vocab = member(model, "vocab", "model", src);
  CLEAVE_CHECK(vocab.is_object(), "{}: model.vocab is {}; expected an object {{token: id}}", src, shown(vocab));
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    CLEAVE_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                     id.get<std::int64_t>() < std::numeric_limits<std::int32_t>::max(),
                 "{}: model.vocab[\"{}\"] is {}; expected an id, a whole number in [0, 2^31 - 1)", src, token, shown(id));
    spec.vocab.emplace_back(token, static_cast<std::int32_t>(id.get<std::int64_t>()));
  }

  const json& merges = member(model, "merges", "model", src);
  CLEAVE_CHECK(merges.is_array(), "{}: model.merges is {}; expected an array of \"a b\" or [\"a\", \"b\"]", src,
               shown(merges));
  spec.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const std::size_t space = line.find(' ');
      CLEAVE_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size(),
                   "{}: model.merges[{}] is {}; expected two tokens separated by one space (\"a b\")", src, i, shown(m));
      spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else {
      CLEAVE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "{}: model.merges[{}] is {}; expected \"a b\" or [\"a\", \"b\"]", src, i, shown(m));
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
}

void read_added_tokens(const json& root, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  CLEAVE_CHECK(it->is_array(), "{}: added_tokens is {}; expected an array", src, shown(*it));
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    CLEAVE_CHECK(t.is_object(), "{}: {} is {}; expected an object", src, where, shown(t));
    const json& id = member(t, "id", where, src);
    const json& content = member(t, "content", where, src);
    CLEAVE_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                     id.get<std::int64_t>() < std::numeric_limits<std::int32_t>::max(),
                 "{}: {}.id is {}; expected a whole number in [0, 2^31 - 1)", src, where, shown(id));
    CLEAVE_CHECK(content.is_string() && !content.get<std::string>().empty(),
                 "{}: {}.content is {}; expected a non-empty string", src, where, shown(content));
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      CLEAVE_CHECK(!flag(t, key, false, where, src), "{}: {}.{} is true (token {}); cleave supports added tokens "
                   "with single_word, lstrip and rstrip false", src, where, key, shown(content));
    }
    spec.added_tokens.push_back({content.get<std::string>(), static_cast<std::int32_t>(id.get<std::int64_t>()),
                                 flag(t, "special", false, where, src), flag(t, "normalized", true, where, src)});
  }
}

}  // namespace

TokenizerSpec parse_tokenizer_json(std::string_view json_text, const std::string& source) {
  TokenizerSpec spec;
  spec.source = source;
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    CLEAVE_THROW("{}: not valid JSON ({})", source, e.what());
  }
  CLEAVE_CHECK(root.is_object(), "{}: the file holds {}, not a tokenizer.json object", source, shown(root));
  read_model(member(root, "model", "the file", source), spec);
  const auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) read_normalizer(*normalizer, "normalizer", spec);
  read_pre_tokenizer(member(root, "pre_tokenizer", "the file", source), spec);
  const bool byte_level = spec.kind == TokenizerKind::kByteLevel;
  CLEAVE_CHECK(!byte_level || !spec.byte_fallback,
               "{}: model.byte_fallback is true with a ByteLevel pre-tokenizer; byte fallback belongs to "
               "SentencePiece-style BPE (a Metaspace pre-tokenizer or a Replace normalizer). {}", source, kSupported);
  const json& decoder = member(root, "decoder", "the file", source);
  CLEAVE_CHECK(!decoder.is_null(), "{}: decoder is null; {}", source, kSupported);
  read_decoder(decoder, "decoder", spec);
  if (const auto post = root.find("post_processor"); post != root.end()) read_post_processor(*post, "post_processor", spec);
  read_added_tokens(root, spec);
  return spec;
}

Tokenizer read_tokenizer_json(const std::string& path) {
  const std::string source = "tokenizer " + path;
  std::error_code ec;
  CLEAVE_CHECK(std::filesystem::exists(path, ec), "{}: no such file", source);
  CLEAVE_CHECK(std::filesystem::is_regular_file(path, ec), "{}: not a regular file", source);
  std::ifstream file(path, std::ios::binary);
  CLEAVE_CHECK(file.good(), "{}: cannot open it for reading", source);
  std::ostringstream text;
  text << file.rdbuf();
  CLEAVE_CHECK(!file.bad(), "{}: read error", source);
  return Tokenizer(parse_tokenizer_json(text.str(), source));
}

}  // namespace cleave::tokenizer
