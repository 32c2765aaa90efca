// Normalizer steps and Metaspace (see normalizer.hpp).
#include "engine/tokenizer/normalizer.hpp"

namespace cleave::tokenizer {
namespace {

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit = text.find(pattern); hit != std::string_view::npos; hit = text.find(pattern, pos)) {
    out.append(text.substr(pos, hit - pos));
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.content);
        break;
      case NormalizerStep::Kind::kReplace: s = replace_all(s, step.pattern, step.content); break;
    }
  }
  return s;
}

std::string_view prepend_scheme_name(PrependScheme scheme) {
  switch (scheme) {
    case PrependScheme::kAlways: return "always";
    case PrependScheme::kFirst: return "first";
    case PrependScheme::kNever: return "never";
  }
  return "?";
}

void metaspace_words(const MetaspaceSpec& spec, std::string_view piece, bool at_text_start,
                     std::vector<std::string>& words) {
  const std::string& rep = spec.replacement;
  std::string s = replace_all(piece, " ", rep);
  const bool starts = s.compare(0, rep.size(), rep) == 0;
  if (!starts && (spec.prepend == PrependScheme::kAlways || (spec.prepend == PrependScheme::kFirst && at_text_start))) {
    s.insert(0, rep);
  }
  if (s.empty()) return;
  if (!spec.split) {
    words.push_back(std::move(s));
    return;
  }
  // MergedWithNext: each replacement begins a word.
  std::size_t begin = 0;
  for (std::size_t hit = s.find(rep, 1); hit != std::string::npos; hit = s.find(rep, hit + rep.size())) {
    if (hit > begin) words.push_back(s.substr(begin, hit - begin));
    begin = hit;
  }
  words.push_back(s.substr(begin));
}

}  // namespace cleave::tokenizer
