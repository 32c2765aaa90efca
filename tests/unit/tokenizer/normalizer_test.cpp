// The Unicode normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Strip) and Regex Replace on small cases whose results
// were taken from Python 3.11's unicodedata (Unicode 14.0.0, the tables' version) and `tokenizers` 0.23.3; the
// whole-file proof against `tokenizers` is benchmarks/peers/sentencepiece_check.py (RESULTS-sentencepiece.md).
// Also: the tokenizer.json reader builds these steps, and refuses the regexes and normalizers it lacks by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/tokenizer/normalizer.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/tokenizer/unicode_normalization.hpp"

namespace cleave::tokenizer::normalizer_test {
namespace {

using nlohmann::json;

std::string nf(const char* text, UnicodeForm form) { return normalize_unicode(text, form); }

TEST(UnicodeNormalization, ComposesDecomposesAndReorders) {
  EXPECT_EQ(nf("e\u0301", UnicodeForm::kNFC), "\u00e9");
  EXPECT_EQ(nf("\u00e9", UnicodeForm::kNFD), "e\u0301");
  EXPECT_EQ(nf("a\u0301\u0323", UnicodeForm::kNFC), "\u1ea1\u0301");  // reordered below (220) before above (230)
  EXPECT_EQ(nf("a\u0305\u0301", UnicodeForm::kNFC), "a\u0305\u0301");  // U+0301 blocked by U+0305 (both 230)
  EXPECT_EQ(nf("\u0958", UnicodeForm::kNFC), "\u0915\u093c");          // excluded from composition
  EXPECT_EQ(nf("\u212b", UnicodeForm::kNFC), "\u00c5");                // singleton: angstrom sign
  EXPECT_EQ(nf("\u0b47\u0b3e", UnicodeForm::kNFC), "\u0b4b");          // two starters compose
  EXPECT_EQ(nf("\ud55c", UnicodeForm::kNFD), "\u1112\u1161\u11ab");    // Hangul by arithmetic
  EXPECT_EQ(nf("\u1112\u1161\u11ab", UnicodeForm::kNFC), "\ud55c");
  EXPECT_EQ(nf("\u1e9b\u0323", UnicodeForm::kNFD), "\u017f\u0323\u0307");
  EXPECT_EQ(nf("plain ASCII", UnicodeForm::kNFKD), "plain ASCII");
}

TEST(UnicodeNormalization, CompatibilityForms) {
  EXPECT_EQ(nf("\ufb01", UnicodeForm::kNFKC), "fi");
  EXPECT_EQ(nf("\ufb01", UnicodeForm::kNFC), "\ufb01");
  EXPECT_EQ(nf("\u00bd", UnicodeForm::kNFKD), "1\u20442");
  EXPECT_EQ(nf("\u216b", UnicodeForm::kNFKC), "XII");
  EXPECT_EQ(nf("\uff76", UnicodeForm::kNFKC), "\u30ab");
  EXPECT_EQ(nf("\u1e9b\u0323", UnicodeForm::kNFKC), "\u1e69");
  EXPECT_EQ(nf("x\u00a0y", UnicodeForm::kNFKC), "x y");
}

// Where `tokenizers` 0.23.3 differs from Unicode 14.0 (scripts/gen_unicode_normalization.py pins it), Cleave
// follows `tokenizers`: no decomposition for newer compatibility characters, class 0 for newer marks, Rust's newer
// lowercase mappings.
TEST(UnicodeNormalization, FollowsTokenizersWhereItsUnicodeDiffers) {
  EXPECT_EQ(nf("\U0001fbf5", UnicodeForm::kNFKC), "\U0001fbf5");  // SEGMENTED DIGIT FIVE: "5" in Unicode 14.0
  EXPECT_EQ(nf("\U00010793", UnicodeForm::kNFKD), "\U00010793");  // "\u0260" in Unicode 14.0
  EXPECT_EQ(nf("\U00011935\U00011930", UnicodeForm::kNFC), "\U00011935\U00011930");  // U+11938 in 14.0
  EXPECT_EQ(nf("a\u1acb\u0334", UnicodeForm::kNFD), "a\u1acb\u0334");  // U+1ACB a starter: not reordered
  EXPECT_EQ(lowercase("\U00010d50\ua7cb"), "\U00010d70\u0264");
}

TEST(UnicodeNormalization, LowercaseOneCharacterAtATime) {
  EXPECT_EQ(lowercase("\u0130"), "i\u0307");
  EXPECT_EQ(lowercase("\u0391\u03a3"), "\u03b1\u03c3");  // no final-sigma context, as char::to_lowercase
  EXPECT_EQ(lowercase("\u00c0\u01c4\u1e9e\u212a"), "\u00e0\u01c6\u00df" "k");
  EXPECT_EQ(lowercase("MiXeD 123 \u0100\u0101"), "mixed 123 \u0101\u0101");
}

std::string run(const json& normalizer, const std::string& text) {
  json j = {{"version", "1.0"},
            {"normalizer", normalizer},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}}},
            {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"vocab", {{"\u2581", 0}}}, {"merges", json::array()}}}};
  const TokenizerSpec spec = parse_tokenizer_json(j.dump(), "t.json");
  return normalize(spec.normalizer, text);
}

TEST(Normalizer, ReadFromTokenizerJson) {
  EXPECT_EQ(run({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \u3000x y\u00a0\n"), "x y");
  EXPECT_EQ(run({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, "  x  "), "  x");
  EXPECT_EQ(run({{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}}, "\ufb01 \u216b"),
            "fi xii");
  const auto replace = [](const char* regex, const char* content) {
    return json{{"type", "Replace"}, {"pattern", {{"Regex", regex}}}, {"content", content}};
  };
  EXPECT_EQ(run(replace(" {2,}", " "), "a   b c  d"), "a b c d");
  EXPECT_EQ(run(replace("x{2,3}", "-"), "xxxxxxx.x"), "--x.x");  // greedy 3 + 3, one left over
  EXPECT_EQ(run(replace("x{2}", "-"), "xxxxx"), "--x");
  EXPECT_EQ(run(replace("\u2581+", "_"), "a\u2581\u2581b\u2581"), "a_b_");
  EXPECT_EQ(run(replace("\\.\\.", "!"), "a....b"), "a!!b");  // an escaped literal
}

std::string refusal(const json& normalizer) {
  try {
    run(normalizer, "x");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Normalizer, RefusesByName) {
  const auto replace = [](const char* regex) {
    return json{{"type", "Replace"}, {"pattern", {{"Regex", regex}}}, {"content", " "}};
  };
  for (const char* regex : {"\\s+", "[ab]", "a*", "ab+", "x{0,2}", "(a|b)"}) {
    const std::string message = refusal(replace(regex));
    EXPECT_NE(message.find("t.json: normalizer.pattern.Regex is"), std::string::npos) << regex << ": " << message;
    EXPECT_NE(message.find("String pattern"), std::string::npos) << message;
  }
  const std::string bert = refusal({{"type", "BertNormalizer"}});
  EXPECT_NE(bert.find("t.json: normalizer.type is \"BertNormalizer\""), std::string::npos) << bert;
  EXPECT_NE(bert.find("NFKC"), std::string::npos) << bert;  // says what is supported
  EXPECT_NE(refusal({{"type", "Strip"}, {"strip_left", 1}}).find("normalizer.strip_left is 1"), std::string::npos);
}

}  // namespace
}  // namespace cleave::tokenizer::normalizer_test
