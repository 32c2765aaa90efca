// Normalizer steps and Metaspace (see normalizer.hpp).
#include "engine/tokenizer/normalizer.hpp"

#include <algorithm>

#include "engine/tokenizer/unicode_classes.hpp"

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

std::string replace_runs(std::string_view text, const NormalizerStep& step) {
  const std::string_view unit = step.pattern;
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit = text.find(unit); hit != std::string_view::npos; hit = text.find(unit, pos)) {
    out.append(text.substr(pos, hit - pos));
    std::size_t run = 0, end = hit;
    while (text.compare(end, unit.size(), unit) == 0) {
      ++run;
      end += unit.size();
    }
    // Greedy matches from the run's start; a remainder shorter than min_run stays.
    while (run >= step.min_run) {
      const std::size_t take = step.max_run == 0 ? run : std::min(run, step.max_run);
      out.append(step.content);
      run -= take;
    }
    for (; run > 0; --run) out.append(unit);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  std::size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      const CodePoint cp = decode_utf8(text, begin);
      if (!is_white_space(cp.value)) break;
      begin += cp.bytes;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      if (!is_white_space(decode_utf8(text, start).value)) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

std::string_view normalizer_step_name(const NormalizerStep& step) {
  switch (step.kind) {
    case NormalizerStep::Kind::kPrepend: return "Prepend";
    case NormalizerStep::Kind::kReplace: return "Replace";
    case NormalizerStep::Kind::kReplaceRun: return "Replace(Regex)";
    case NormalizerStep::Kind::kUnicode: return unicode_form_name(step.form);
    case NormalizerStep::Kind::kLowercase: return "Lowercase";
    case NormalizerStep::Kind::kStrip: return "Strip";
  }
  return "?";
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.content);
        break;
      case NormalizerStep::Kind::kReplace: s = replace_all(s, step.pattern, step.content); break;
      case NormalizerStep::Kind::kReplaceRun: s = replace_runs(s, step); break;
      case NormalizerStep::Kind::kUnicode: s = normalize_unicode(s, step.form); break;
      case NormalizerStep::Kind::kLowercase: s = lowercase(s); break;
      case NormalizerStep::Kind::kStrip: s = strip(s, step.strip_left, step.strip_right); break;
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
