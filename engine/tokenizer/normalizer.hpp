// Normalizers and the Metaspace pre-tokenizer of SentencePiece-style BPE tokenizers (Llama 2, Mistral,
// TinyLlama, Gemma), as Hugging Face `tokenizers` applies them.
//
//   normalizer   a list of steps run in order on each piece of text between added tokens whose
//                "normalized" is false: Prepend(p) puts p before a non-empty piece; Replace(a, b) replaces
//                every non-overlapping occurrence of the string a, leftmost first, by b; ReplaceRun(u, n, m, b)
//                (a Regex pattern "u{n,m}", "u{n,}", "u+" of one code point u) replaces each leftmost-longest
//                run of n..m copies of u by b, as Oniguruma's greedy find-all does; NFC/NFD/NFKC/NFKD and
//                Lowercase (unicode_normalization.hpp); Strip removes White_Space code points at the left
//                and/or right end.
//   Metaspace    replaces ' ' by the replacement (U+2581 "▁"), prepends one per the prepend scheme
//                (always; first: only to the piece that starts the text; never) unless the piece already
//                starts with it, and with split true cuts before each replacement (MergedWithNext).
//
// Invariant: pure functions of their inputs. To add a normalizer: a Kind, its step in normalize(), its
// reader in tokenizer_json.cpp, and ids checked against `tokenizers` in tests/unit/tokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/unicode_normalization.hpp"

namespace cleave::tokenizer {

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kReplaceRun, kUnicode, kLowercase, kStrip };
  Kind kind = Kind::kPrepend;
  std::string pattern;  // Replace: the string replaced (non-empty); ReplaceRun: the repeated code point
  std::string content;  // Prepend: the prefix; Replace, ReplaceRun: the replacement
  UnicodeForm form = UnicodeForm::kNFC;  // Unicode
  std::size_t min_run = 1, max_run = 0;  // ReplaceRun: copies of `pattern` per match; max_run 0: unbounded
  bool strip_left = true, strip_right = true;  // Strip
};

// "Prepend", "Replace", "NFKC", "Lowercase", "Strip", ... (the tokenizer.json type).
std::string_view normalizer_step_name(const NormalizerStep& step);

// `text` after every step, in order.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text);

enum class PrependScheme { kAlways, kFirst, kNever };
std::string_view prepend_scheme_name(PrependScheme scheme);  // "always" | "first" | "never"

struct MetaspaceSpec {
  std::string replacement = "\xE2\x96\x81";  // U+2581, as UTF-8
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;
};

// Metaspace on one piece: the words BPE merges within, appended to `words` (each non-empty). `at_text_start`
// says whether the piece starts the text given to encode() (the "first" scheme prepends only then).
void metaspace_words(const MetaspaceSpec& spec, std::string_view piece, bool at_text_start,
                     std::vector<std::string>& words);

}  // namespace cleave::tokenizer
