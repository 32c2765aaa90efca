// tokenizer.json -> TokenizerSpec (see tokenizer_json.hpp). Every refusal says what is supported.
#include "engine/tokenizer/tokenizer_json.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::tokenizer {
namespace {

using nlohmann::json;

constexpr std::string_view kSupported =
    "cleave supports byte-level BPE tokenizers (GPT-2, Llama 3 and ones trained like them): model.type \"BPE\", "
    "normalizer null, pre_tokenizer ByteLevel or Sequence [Split (GPT-2 or Llama 3 pattern), ByteLevel], decoder "
    "ByteLevel";

std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 120) text = text.substr(0, 117) + "...";
  return text;
}

// An optional boolean key: its value, `fallback` when absent or null.
bool flag(const json& object, const char* key, bool fallback, const std::string& where, const std::string& source) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  CLEAVE_CHECK(it->is_boolean(), "{}: {}.{} is {}; expected true or false", source, where, key, shown(*it));
  return it->get<bool>();
}

const json& member(const json& object, const char* key, const std::string& where, const std::string& source) {
  const auto it = object.find(key);
  CLEAVE_CHECK(it != object.end(), "{}: {} has no \"{}\" key. {}", source, where, key, kSupported);
  return *it;
}

std::string type_of(const json& object, const std::string& where, const std::string& source) {
  CLEAVE_CHECK(object.is_object(), "{}: {} is {}; expected an object. {}", source, where, shown(object), kSupported);
  const json& type = member(object, "type", where, source);
  CLEAVE_CHECK(type.is_string(), "{}: {}.type is {}; expected a string. {}", source, where, shown(type), kSupported);
  return type.get<std::string>();
}

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
  CLEAVE_CHECK(!flag(model, "byte_fallback", false, "model", src),
               "{}: model.byte_fallback is true: a SentencePiece-style BPE (as Llama 2 uses), not byte-level. {}", src,
               kSupported);
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

void read_byte_level(const json& byte_level, const std::string& where, bool after_split, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  spec.add_prefix_space = flag(byte_level, "add_prefix_space", true, where, src);
  const bool use_regex = flag(byte_level, "use_regex", true, where, src);
  if (after_split) {
    CLEAVE_CHECK(!use_regex, "{}: {}.use_regex is true after a Split: the text would be split twice; cleave supports "
                 "Sequence [Split, ByteLevel with use_regex false] (as Llama 3 has)", src, where);
  } else {
    CLEAVE_CHECK(use_regex, "{}: {}.use_regex is false with no Split before it; cleave supports ByteLevel with "
                 "use_regex true (GPT-2's pattern) or Sequence [Split, ByteLevel]", src, where);
  }
}

void read_split(const json& split, const std::string& where, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const json& pattern = member(split, "pattern", where, src);
  const auto regex = pattern.is_object() ? pattern.find("Regex") : pattern.end();
  CLEAVE_CHECK(pattern.is_object() && regex != pattern.end() && regex->is_string(),
               "{}: {}.pattern is {}; cleave supports a {{\"Regex\": ...}} pattern, GPT-2's or Llama 3's", src, where,
               shown(pattern));
  const auto known = recognise_pattern(regex->get<std::string>());
  CLEAVE_CHECK(known.has_value(),
               "{}: {}.pattern.Regex is {}; cleave supports exactly these two patterns: GPT-2's {} and Llama 3's {}",
               src, where, shown(*regex), json(std::string(pattern_text(SplitPattern::kGpt2))).dump(),
               json(std::string(pattern_text(SplitPattern::kLlama3))).dump());
  spec.pattern = *known;
  const json& behavior = member(split, "behavior", where, src);
  CLEAVE_CHECK(behavior == "Isolated", "{}: {}.behavior is {}; cleave supports \"Isolated\"", src, where,
               shown(behavior));
  CLEAVE_CHECK(!flag(split, "invert", false, where, src), "{}: {}.invert is true; cleave supports false", src, where);
}

void read_pre_tokenizer(const json& pre, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  CLEAVE_CHECK(!pre.is_null(), "{}: pre_tokenizer is null; {}", src, kSupported);
  const std::string type = type_of(pre, "pre_tokenizer", src);
  if (type == "ByteLevel") {
    spec.pattern = SplitPattern::kGpt2;
    spec.split_before_byte_level = false;
    read_byte_level(pre, "pre_tokenizer", false, spec);
    return;
  }
  CLEAVE_CHECK(type == "Sequence", "{}: pre_tokenizer.type is \"{}\"; {}", src, type, kSupported);
  const json& list = member(pre, "pretokenizers", "pre_tokenizer", src);
  CLEAVE_CHECK(list.is_array() && list.size() == 2,
               "{}: pre_tokenizer.pretokenizers is {}; cleave supports exactly [Split, ByteLevel]", src, shown(list));
  const std::string first = type_of(list[0], "pre_tokenizer.pretokenizers[0]", src);
  const std::string second = type_of(list[1], "pre_tokenizer.pretokenizers[1]", src);
  CLEAVE_CHECK(first == "Split" && second == "ByteLevel",
               "{}: pre_tokenizer.pretokenizers are [{}, {}]; cleave supports exactly [Split, ByteLevel]", src, first,
               second);
  read_split(list[0], "pre_tokenizer.pretokenizers[0]", spec);
  spec.split_before_byte_level = true;
  read_byte_level(list[1], "pre_tokenizer.pretokenizers[1]", true, spec);
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
  CLEAVE_CHECK(normalizer == root.end() || normalizer->is_null(),
               "{}: normalizer is {}; cleave supports no normalizer (null), as GPT-2 and Llama 3 have", source,
               shown(*normalizer));
  read_pre_tokenizer(member(root, "pre_tokenizer", "the file", source), spec);
  const json& decoder = member(root, "decoder", "the file", source);
  CLEAVE_CHECK(!decoder.is_null(), "{}: decoder is null; {}", source, kSupported);
  const std::string decoder_type = type_of(decoder, "decoder", source);
  CLEAVE_CHECK(decoder_type == "ByteLevel", "{}: decoder.type is \"{}\"; {}", source, decoder_type, kSupported);
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
