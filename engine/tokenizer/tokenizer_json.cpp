// tokenizer.json -> TokenizerSpec (see tokenizer_json.hpp). Every refusal says what is supported.
#include "engine/tokenizer/tokenizer_json.hpp"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {
namespace {

using nlohmann::json;

constexpr std::string_view kSupported =
    "cleave supports BPE tokenizers (model.type \"BPE\") of two kinds: byte-level (GPT-2, Llama 3: pre_tokenizer "
    "ByteLevel or Sequence [Split (GPT-2 or Llama 3 pattern), ByteLevel], decoder ByteLevel) and SentencePiece-style "
    "(Llama 2, Mistral, Gemma: pre_tokenizer Metaspace or null, normalizer null or Prepend/Replace/NFC/NFD/NFKC/NFKD/"
    "Lowercase/Strip/Sequence, decoder "
    "Metaspace or Sequence [Replace, ByteFallback, Fuse, Strip]); see docs/tokenizer.md";

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

// Metaspace's prepend_scheme as `tokenizers` reads it: prepend_scheme when given (default "always");
// add_prefix_space false (older files) means "never".
PrependScheme read_prepend_scheme(const json& meta, const std::string& where, const std::string& src) {
  PrependScheme scheme = PrependScheme::kAlways;
  const auto it = meta.find("prepend_scheme");
  const bool given = it != meta.end() && !it->is_null();
  if (given) {
    const std::string name = it->is_string() ? it->get<std::string>() : "";
    CLEAVE_CHECK(name == "always" || name == "first" || name == "never",
                 "{}: {}.prepend_scheme is {}; expected \"always\", \"first\" or \"never\"", src, where, shown(*it));
    scheme = name == "always" ? PrependScheme::kAlways : name == "first" ? PrependScheme::kFirst : PrependScheme::kNever;
  }
  if (!flag(meta, "add_prefix_space", true, where, src)) {
    CLEAVE_CHECK(!given || scheme == PrependScheme::kNever,
                 "{}: {}.add_prefix_space is false but prepend_scheme is \"{}\"; they disagree (drop add_prefix_space)",
                 src, where, prepend_scheme_name(scheme));
    scheme = PrependScheme::kNever;
  }
  return scheme;
}

std::string read_replacement(const json& meta, const std::string& where, const std::string& src) {
  const json& rep = member(meta, "replacement", where, src);
  CLEAVE_CHECK(rep.is_string() && !rep.get<std::string>().empty() &&
                   decode_utf8(rep.get<std::string>(), 0).bytes == rep.get<std::string>().size(),
               "{}: {}.replacement is {}; expected one character (\"\u2581\")", src, where, shown(rep));
  return rep.get<std::string>();
}

void read_pre_tokenizer(const json& pre, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  if (pre.is_null()) {  // SentencePiece-style with the spaces replaced by a normalizer: each piece is one word
    spec.kind = TokenizerKind::kSentencePiece;
    return;
  }
  const std::string type = type_of(pre, "pre_tokenizer", src);
  if (type == "Metaspace") {
    spec.kind = TokenizerKind::kSentencePiece;
    MetaspaceSpec meta;
    meta.replacement = read_replacement(pre, "pre_tokenizer", src);
    meta.prepend = read_prepend_scheme(pre, "pre_tokenizer", src);
    meta.split = flag(pre, "split", true, "pre_tokenizer", src);
    spec.metaspace = meta;
    return;
  }
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

// A Replace normalizer's {"Regex": ...} pattern in the subset cleave implements: a literal (characters that are
// not regex syntax, or any punctuation escaped by a backslash, \t \n \r) -> Replace; one such character
// followed by +, {n}, {n,} or {n,m} with n >= 1 -> ReplaceRun. Anything else: nullopt.
std::optional<NormalizerStep> regex_step(const std::string& regex, const std::string& content) {
  constexpr std::string_view kSyntax = ".^$*+?()[]{}|\\";
  std::vector<std::string> units;
  std::size_t pos = 0;
  while (pos < regex.size()) {
    const char c = regex[pos];
    if (c == '\\') {
      if (pos + 1 >= regex.size()) return std::nullopt;
      const char e = regex[pos + 1];
      if (e == 't' || e == 'n' || e == 'r') units.emplace_back(1, e == 't' ? '\t' : e == 'n' ? '\n' : '\r');
      else if (std::ispunct(static_cast<unsigned char>(e)) || e == ' ') units.emplace_back(1, e);
      else return std::nullopt;
      pos += 2;
    } else if (kSyntax.find(c) != std::string_view::npos) {
      break;
    } else {
      const std::size_t bytes = decode_utf8(regex, pos).bytes;
      units.emplace_back(regex.substr(pos, bytes));
      pos += bytes;
    }
  }
  if (units.empty()) return std::nullopt;
  if (pos == regex.size()) {
    std::string literal;
    for (const std::string& u : units) literal += u;
    return NormalizerStep{NormalizerStep::Kind::kReplace, literal, content};
  }
  if (units.size() != 1) return std::nullopt;
  NormalizerStep step{NormalizerStep::Kind::kReplaceRun, units[0], content};
  const std::string quantifier = regex.substr(pos);
  if (quantifier == "+") return step;
  std::size_t lo = 0, hi = 0;
  char comma = 0, close = 0;
  int read = 0;
  if (std::sscanf(quantifier.c_str(), "{%zu%c", &lo, &close) == 2 && close == '}' &&
      quantifier == fmt::format("{{{}}}", lo)) {
    hi = lo;
  } else if (std::sscanf(quantifier.c_str(), "{%zu%c%n", &lo, &comma, &read) == 2 && comma == ',' &&
             quantifier == fmt::format("{{{},}}", lo)) {
    hi = 0;
  } else if (std::sscanf(quantifier.c_str(), "{%zu,%zu%c", &lo, &hi, &close) == 3 && close == '}' &&
             quantifier == fmt::format("{{{},{}}}", lo, hi) && hi >= lo) {
  } else {
    return std::nullopt;
  }
  if (lo == 0) return std::nullopt;  // matches of no text: not implemented
  step.min_run = lo;
  step.max_run = hi;
  return step;
}

void read_normalizer(const json& n, const std::string& where, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const std::string type = type_of(n, where, src);
  if (type == "Sequence") {
    const json& list = member(n, "normalizers", where, src);
    CLEAVE_CHECK(list.is_array(), "{}: {}.normalizers is {}; expected an array", src, where, shown(list));
    for (std::size_t i = 0; i < list.size(); ++i) read_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i), spec);
  } else if (type == "Prepend") {
    const json& prepend = member(n, "prepend", where, src);
    CLEAVE_CHECK(prepend.is_string(), "{}: {}.prepend is {}; expected a string", src, where, shown(prepend));
    spec.normalizer.push_back({NormalizerStep::Kind::kPrepend, "", prepend.get<std::string>()});
  } else if (type == "Replace") {
    const json& pattern = member(n, "pattern", where, src);
    const json& content = member(n, "content", where, src);
    CLEAVE_CHECK(content.is_string(), "{}: {}.content is {}; expected a string", src, where, shown(content));
    const auto string = pattern.is_object() ? pattern.find("String") : pattern.end();
    const auto regex = pattern.is_object() ? pattern.find("Regex") : pattern.end();
    if (regex != pattern.end() && regex->is_string()) {
      const auto step = regex_step(regex->get<std::string>(), content.get<std::string>());
      CLEAVE_CHECK(step.has_value(),
                   "{}: {}.pattern.Regex is {}; cleave implements the Regex patterns tokenizers use in Replace: a "
                   "literal (punctuation escaped by \\) or one character repeated (\" {{2,}}\", \"x+\", \"x{{n,m}}\"); "
                   "rewrite it as a String pattern if it is a literal, or use a tokenizer without it",
                   src, where, shown(*regex));
      spec.normalizer.push_back(*step);
      return;
    }
    CLEAVE_CHECK(pattern.is_object() && string != pattern.end() && string->is_string() && !string->get<std::string>().empty(),
                 "{}: {}.pattern is {}; expected {{\"String\": \"...\"}} (non-empty) or {{\"Regex\": \"...\"}}", src,
                 where, shown(pattern));
    spec.normalizer.push_back({NormalizerStep::Kind::kReplace, string->get<std::string>(), content.get<std::string>()});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    NormalizerStep step;
    step.kind = NormalizerStep::Kind::kUnicode;
    step.form = type == "NFC" ? UnicodeForm::kNFC : type == "NFD" ? UnicodeForm::kNFD
              : type == "NFKC" ? UnicodeForm::kNFKC : UnicodeForm::kNFKD;
    spec.normalizer.push_back(step);
  } else if (type == "Lowercase") {
    NormalizerStep step;
    step.kind = NormalizerStep::Kind::kLowercase;
    spec.normalizer.push_back(step);
  } else if (type == "Strip") {
    NormalizerStep step;
    step.kind = NormalizerStep::Kind::kStrip;
    step.strip_left = flag(n, "strip_left", true, where, src);
    step.strip_right = flag(n, "strip_right", true, where, src);
    spec.normalizer.push_back(step);
  } else {
    CLEAVE_THROW("{}: {}.type is \"{}\"; cleave supports the normalizers Prepend, Replace (a String, or a Regex that "
                 "is a literal or one repeated character), NFC, NFD, NFKC, NFKD, Lowercase, Strip and Sequence of "
                 "them, or null (BertNormalizer, StripAccents, Precompiled and others are not implemented); use a "
                 "tokenizer.json without it", src, where, type);
  }
}

void read_decoder(const json& d, const std::string& where, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const std::string type = type_of(d, where, src);
  const bool byte_level = spec.kind == TokenizerKind::kByteLevel;
  if (byte_level) {
    CLEAVE_CHECK(type == "ByteLevel", "{}: {}.type is \"{}\" with a ByteLevel pre-tokenizer; cleave supports the "
                 "ByteLevel decoder there. {}", src, where, type, kSupported);
    return;
  }
  if (type == "Sequence") {
    const json& list = member(d, "decoders", where, src);
    CLEAVE_CHECK(list.is_array(), "{}: {}.decoders is {}; expected an array", src, where, shown(list));
    for (std::size_t i = 0; i < list.size(); ++i) read_decoder(list[i], fmt::format("{}.decoders[{}]", where, i), spec);
  } else if (type == "Metaspace") {
    spec.decode_space = read_replacement(d, where, src);
    spec.decode_strip_space = read_prepend_scheme(d, where, src) != PrependScheme::kNever;
  } else if (type == "Replace") {
    const json& pattern = member(d, "pattern", where, src);
    const auto string = pattern.is_object() ? pattern.find("String") : pattern.end();
    const auto content = d.find("content");
    CLEAVE_CHECK(string != pattern.end() && string->is_string() && !string->get<std::string>().empty() &&
                     content != d.end() && *content == " ",
                 "{}: {} is {}; cleave supports a Replace decoder of a String pattern by \" \" (\"\u2581\" -> \" \")",
                 src, where, shown(d));
    spec.decode_space = string->get<std::string>();
  } else if (type == "ByteFallback") {
    spec.decode_byte_fallback = true;
  } else if (type == "Fuse") {
  } else if (type == "Strip") {
    const auto content = d.find("content");
    const auto start = d.find("start");
    const auto stop = d.find("stop");
    CLEAVE_CHECK(content != d.end() && *content == " " && start != d.end() && start->is_number_unsigned() &&
                     start->get<std::uint64_t>() <= 1 && (stop == d.end() || *stop == 0),
                 "{}: {} is {}; cleave supports Strip of at most one leading \" \" (content \" \", start 0 or 1, stop 0)",
                 src, where, shown(d));
    spec.decode_strip_space = start->get<std::uint64_t>() == 1;
  } else {
    CLEAVE_THROW("{}: {}.type is \"{}\"; cleave supports, for a SentencePiece-style tokenizer, the decoders "
                 "Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence of them", src, where, type);
  }
}

std::vector<std::int32_t> special_ids(const json& specials, const std::string& name, const std::string& where,
                                      const std::string& src) {
  const auto it = specials.is_object() ? specials.find(name) : specials.end();
  CLEAVE_CHECK(it != specials.end() && it->is_object() && it->contains("ids") && (*it)["ids"].is_array(),
               "{}: {}.single names special token \"{}\", but {}.special_tokens has no \"{}\" with \"ids\"", src,
               where, name, where, name);
  std::vector<std::int32_t> ids;
  for (const json& id : (*it)["ids"]) {
    CLEAVE_CHECK(id.is_number_unsigned() && id.get<std::uint64_t>() < std::numeric_limits<std::int32_t>::max(),
                 "{}: {}.special_tokens[\"{}\"].ids holds {}; expected ids", src, where, name, shown(id));
    ids.push_back(static_cast<std::int32_t>(id.get<std::uint64_t>()));
  }
  return ids;
}

// The ids a post-processor puts around one sequence (TemplateProcessing "single", Roberta/Bert's cls and sep).
void read_post_processor(const json& p, const std::string& where, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  if (p.is_null()) return;
  const std::string type = type_of(p, where, src);
  if (type == "Sequence") {
    const json& list = member(p, "processors", where, src);
    CLEAVE_CHECK(list.is_array(), "{}: {}.processors is {}; expected an array", src, where, shown(list));
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], fmt::format("{}.processors[{}]", where, i), spec);
  } else if (type == "ByteLevel") {  // offsets only
  } else if (type == "TemplateProcessing") {
    const json& single = member(p, "single", where, src);
    const json& specials = member(p, "special_tokens", where, src);
    CLEAVE_CHECK(single.is_array(), "{}: {}.single is {}; expected an array", src, where, shown(single));
    bool seen_sequence = false;
    for (const json& piece : single) {
      if (piece.is_object() && piece.contains("Sequence")) {
        CLEAVE_CHECK(!seen_sequence, "{}: {}.single has two sequences; expected one ($A)", src, where);
        seen_sequence = true;
        continue;
      }
      const auto token = piece.is_object() ? piece.find("SpecialToken") : piece.end();
      CLEAVE_CHECK(token != piece.end() && token->is_object() && token->contains("id") && (*token)["id"].is_string(),
                   "{}: {}.single holds {}; expected {{\"SpecialToken\": {{\"id\": ...}}}} or {{\"Sequence\": ...}}", src,
                   where, shown(piece));
      const auto ids = special_ids(specials, (*token)["id"].get<std::string>(), where, src);
      auto& side = seen_sequence ? spec.template_suffix : spec.template_prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    CLEAVE_CHECK(seen_sequence, "{}: {}.single has no {{\"Sequence\": ...}} ($A)", src, where);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json& pair = member(p, key, where, src);
      CLEAVE_CHECK(pair.is_array() && pair.size() == 2 && pair[1].is_number_unsigned(),
                   "{}: {}.{} is {}; expected [token, id]", src, where, key, shown(pair));
      (std::string_view(key) == "cls" ? spec.template_prefix : spec.template_suffix)
          .push_back(static_cast<std::int32_t>(pair[1].get<std::uint64_t>()));
    }
  } else {
    CLEAVE_THROW("{}: {}.type is \"{}\"; cleave supports the post-processors TemplateProcessing, ByteLevel, "
                 "RobertaProcessing, BertProcessing, Sequence of them, or null", src, where, type);
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
