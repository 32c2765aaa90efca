// Pre-tokenization: the split of text into the words that BPE merges within, by hand-written scanners for
// the two regular expressions byte-level BPE tokenizers use (std::regex has no \p{L}).
//
//   kGpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//            \s*[\r\n]+|\s+(?!\S)|\s+
//
// Invariant: pre_token_end() returns what the regex engine of Hugging Face `tokenizers` (Oniguruma:
// leftmost alternative first, greedy quantifiers with backtracking) matches at `pos`; both patterns match
// every code point, so successive matches tile the text (Split behaviour "Isolated" leaves no gaps).
// Classes are unicode_classes.hpp's. To add a pattern: an enum value, its exact text in pattern_text(), a
// scanner in pre_tokenizer.cpp, and tests against `tokenizers` on awkward text.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace cleave::tokenizer {

enum class SplitPattern { kGpt2, kLlama3 };

std::string_view split_pattern_name(SplitPattern pattern);  // "GPT-2", "Llama 3"
// The regular expression as a tokenizer.json writes it (after JSON unescaping).
std::string_view pattern_text(SplitPattern pattern);
// The pattern whose text is exactly `regex`, if any.
std::optional<SplitPattern> recognise_pattern(std::string_view regex);

// The end of the pre-token that starts at `pos` (pos < text.size(); text valid UTF-8): always > pos.
std::size_t pre_token_end(SplitPattern pattern, std::string_view text, std::size_t pos);

}  // namespace cleave::tokenizer
