// Unicode normalization forms (NFC, NFD, NFKC, NFKD, UAX #15) and per-character lowercasing, as the NFC/NFD/
// NFKC/NFKD and Lowercase normalizers of Hugging Face `tokenizers` apply them to UTF-8 text.
//
//   normalize_unicode  full decomposition (canonical, or compatibility for the K forms; Hangul by arithmetic),
//                      canonical ordering of each run of non-starters (stable by combining class), then for
//                      the C forms canonical composition (a mark composes with the last starter unless
//                      blocked by a mark of the same or a higher class, or by a starter between them)
//   lowercase          each code point alone mapped by its full lowercase mapping (Rust's char::to_lowercase:
//                      no context, so a final capital sigma becomes σ, and U+0130 becomes "i\u0307")
//   is_white_space     the White_Space property (Rust's char::is_whitespace, used by the Strip normalizer)
//
// Invariant: pure functions of the text and the generated tables (unicode_normalization_table.cpp, from
// scripts/gen_unicode_normalization.py; kNormalizationUnicodeVersion says which Unicode). The input must be valid
// UTF-8 (Tokenizer::encode checks it first); ASCII text is returned unchanged without touching the tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cleave::tokenizer {

enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };
std::string_view unicode_form_name(UnicodeForm form);  // "NFC" | "NFD" | "NFKC" | "NFKD"

std::string normalize_unicode(std::string_view text, UnicodeForm form);
std::string lowercase(std::string_view text);
bool is_white_space(char32_t cp);

// The canonical combining class of `cp` (0 for starters and unassigned code points).
std::uint8_t combining_class(char32_t cp);

namespace unicode_data {  // the generated tables (read-only; see the generator's docstring for the layout)
struct CombiningRange {
  char32_t first, last;
  std::uint8_t ccc;
};
struct Composition {
  char32_t first, second, composite;
};
struct LowercaseRun {
  char32_t first, last;
  std::uint32_t stride;
  std::int32_t delta;
};
extern const char kNormalizationUnicodeVersion[];
extern const CombiningRange kCombiningClasses[];
extern const std::size_t kCombiningClassCount;
extern const std::uint32_t kDecompositions[];
extern const std::size_t kDecompositionCount;
extern const char32_t kDecompositionPool[];
extern const std::size_t kDecompositionPoolSize;
extern const Composition kCompositions[];
extern const std::size_t kCompositionCount;
extern const LowercaseRun kLowercase[];
extern const std::size_t kLowercaseCount;
}  // namespace unicode_data

}  // namespace cleave::tokenizer
