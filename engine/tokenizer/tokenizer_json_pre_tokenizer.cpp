// tokenizer.json's pre_tokenizer (tokenizer_json_parts.hpp): ByteLevel, Sequence [Split, ByteLevel], Metaspace or
// null. Invariant: the text is split once: a Split's pattern is GPT-2's or Llama 3's exactly, and a ByteLevel after
// it does not split again (use_regex false).
#include "engine/tokenizer/tokenizer_json_parts.hpp"

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer::json_parts {
namespace {

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

}  // namespace

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

}  // namespace cleave::tokenizer::json_parts
