// NFC/NFD/NFKC/NFKD and lowercasing over the generated tables (see unicode_normalization.hpp).
#include "engine/tokenizer/unicode_normalization.hpp"

#include <algorithm>
#include <vector>

#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {
namespace {

using namespace unicode_data;

// Hangul syllables (Unicode 3.12): S = SBase + (L·VCount + V)·TCount + T.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<char32_t> decode_all(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const CodePoint cp = decode_utf8(text, pos);
    out.push_back(cp.value);
    pos += cp.bytes;
  }
  return out;
}

std::string encode_all(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (const char32_t cp : cps) append_utf8(cp, out);
  return out;
}

// Where each decomposition starts in kDecompositionPool (the tables store only the lengths).
const std::vector<std::uint32_t>& decomposition_offsets() {
  static const std::vector<std::uint32_t> offsets = [] {
    std::vector<std::uint32_t> o(kDecompositionCount + 1, 0);
    for (std::size_t i = 0; i < kDecompositionCount; ++i) o[i + 1] = o[i] + (kDecompositions[i] >> 22);
    return o;
  }();
  return offsets;
}

std::uint32_t decomposition_key(std::uint32_t entry) { return (entry & 0x1FFFFF) << 1 | ((entry >> 21) & 1); }

// The entry for (cp, compat), or kDecompositionCount.
std::size_t find_decomposition(char32_t cp, bool compat) {
  const std::uint32_t key = static_cast<std::uint32_t>(cp) << 1 | (compat ? 1 : 0);
  const std::uint32_t* end = kDecompositions + kDecompositionCount;
  const std::uint32_t* it = std::lower_bound(kDecompositions, end, key, [](std::uint32_t entry, std::uint32_t k) {
    return decomposition_key(entry) < k;
  });
  return it != end && decomposition_key(*it) == key ? static_cast<std::size_t>(it - kDecompositions)
                                                    : kDecompositionCount;
}

void decompose(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / (kVCount * kTCount));
    out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp < 0xA0) {  // nothing below U+00A0 decomposes
    out.push_back(cp);
    return;
  }
  std::size_t i = compat ? find_decomposition(cp, true) : kDecompositionCount;
  if (i == kDecompositionCount) i = find_decomposition(cp, false);
  if (i == kDecompositionCount) {
    out.push_back(cp);
    return;
  }
  const std::uint32_t begin = decomposition_offsets()[i];
  out.insert(out.end(), kDecompositionPool + begin, kDecompositionPool + begin + (kDecompositions[i] >> 22));
}

// The canonical ordering algorithm: each run of non-starters sorted stably by combining class.
void reorder(std::vector<char32_t>& cps) {
  for (std::size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                       [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    }
    i = j;
  }
}

// The primary composite of (a, b), or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, std::pair<char32_t, char32_t> k) {
    return c.first != k.first ? c.first < k.first : c.second < k.second;
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void compose(std::vector<char32_t>& cps) {
  std::vector<char32_t> out;
  out.reserve(cps.size());
  std::ptrdiff_t starter = -1;  // index in `out` of the last starter
  int last_class = 0;           // class of the last code point appended after it
  for (const char32_t cp : cps) {
    const int cc = combining_class(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<std::ptrdiff_t>(out.size()) - 1 == starter;
      if (adjacent || (last_class != 0 && last_class < cc)) {
        if (const char32_t composite = compose_pair(out[static_cast<std::size_t>(starter)], cp)) {
          out[static_cast<std::size_t>(starter)] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<std::ptrdiff_t>(out.size());
    last_class = cc;
    out.push_back(cp);
  }
  cps.swap(out);
}

}  // namespace

std::string_view unicode_form_name(UnicodeForm form) {
  switch (form) {
    case UnicodeForm::kNFC: return "NFC";
    case UnicodeForm::kNFD: return "NFD";
    case UnicodeForm::kNFKC: return "NFKC";
    case UnicodeForm::kNFKD: return "NFKD";
  }
  return "?";
}

std::uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningRange* end = kCombiningClasses + kCombiningClassCount;
  const CombiningRange* it = std::upper_bound(kCombiningClasses, end, cp,
                                              [](char32_t c, const CombiningRange& r) { return c < r.first; });
  if (it == kCombiningClasses) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::string normalize_unicode(std::string_view text, UnicodeForm form) {
  if (is_ascii(text)) return std::string(text);
  const bool compat = form == UnicodeForm::kNFKC || form == UnicodeForm::kNFKD;
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (const char32_t cp : decode_all(text)) decompose(cp, compat, cps);
  reorder(cps);
  if (form == UnicodeForm::kNFC || form == UnicodeForm::kNFKC) compose(cps);
  return encode_all(cps);
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const CodePoint cp = decode_utf8(text, pos);
    pos += cp.bytes;
    char32_t c = cp.value;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      continue;
    }
    if (c == 0x130) {  // the one lowercase mapping longer than a code point
      out.append("i\xCC\x87");
      continue;
    }
    const LowercaseRun* end = kLowercase + kLowercaseCount;
    const LowercaseRun* it =
        std::upper_bound(kLowercase, end, c, [](char32_t v, const LowercaseRun& r) { return v < r.first; });
    if (it != kLowercase) {
      --it;
      if (c <= it->last && (c - it->first) % it->stride == 0) c = static_cast<char32_t>(static_cast<std::int64_t>(c) + it->delta);
    }
    append_utf8(c, out);
  }
  return out;
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace cleave::tokenizer
