// tokenizer.json's normalizer (tokenizer_json_parts.hpp): Prepend, Replace (a String, or a Regex that is a literal
// or one repeated character), NFC/NFD/NFKC/NFKD, Lowercase, Strip and Sequence of them. Invariant: a Regex outside
// that subset is refused, never approximated.
#include "engine/tokenizer/tokenizer_json_parts.hpp"

#include <cctype>
#include <cstdio>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer::json_parts {
namespace {

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

}  // namespace

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

}  // namespace cleave::tokenizer::json_parts
