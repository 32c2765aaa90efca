// The byte-level BPE tokenizer on a tiny tokenizer.json (tiny_tokenizer.hpp): ids worked by hand (merge rank
// before position, leftmost among equal ranks, added tokens, add_prefix_space, ignore_merges, the Llama 3
// pattern), decode(encode(x)) == x on random UTF-8, and decoding.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/tokenizer/unicode_classes.hpp"
#include "unit/tokenizer/tiny_tokenizer.hpp"

namespace cleave::tokenizer::tokenizer_test {
namespace {

using testing::TinyOptions;
using testing::tiny_tokenizer_json;
using Ids = std::vector<std::int32_t>;

Tokenizer tiny(const TinyOptions& options = {}) {
  return Tokenizer(parse_tokenizer_json(tiny_tokenizer_json(options).dump(), "tokenizer tiny.json"));
}

TEST(Tokenizer, HandWorkedIds) {
  Tokenizer tok = tiny();
  EXPECT_EQ(tok.vocab_size(), 270);
  // "hello": (h,e) rank 1, then (l,l) rank 5, then (he,ll) rank 6 -> "hell" "o".
  EXPECT_EQ(tok.encode("hello"), (Ids{262, 111}));
  // "abc": (b,c) has rank 9 < (a,b) rank 10, so b+c merges first although a+b is further left.
  EXPECT_EQ(tok.encode("abc"), (Ids{97, 265}));
  // "aaa": three equal-rank pairs; the leftmost merges: "aa" "a". "aaaa": "aa" "aa", then (aa,aa) rank 8.
  EXPECT_EQ(tok.encode("aaa"), (Ids{263, 97}));
  EXPECT_EQ(tok.encode("aaaa"), (Ids{264}));
  // Pre-tokens "hello", " the", " abc", " it", "'s", " aaaa"; " aaaa": (Ġ,a) rank 4 first takes one 'a'.
  EXPECT_EQ(tok.encode("hello the abc it's aaaa"), (Ids{262, 111, 258, 260, 265, 32, 105, 116, 267, 260, 263, 97}));
  // Bytes without merges are their byte ids; multi-byte characters are several byte tokens.
  EXPECT_EQ(tok.encode(" inn\n"), (Ids{32, 259, 110, 10}));
  EXPECT_EQ(tok.encode("h\xC3\xA9llo \xF0\x9F\x98\x80"), (Ids{104, 195, 169, 261, 111, 32, 240, 159, 152, 128}));
  // An added token is matched in the raw text and is one id.
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (Ids{97, 269, 98}));
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(Tokenizer, MergesAsPairsEqualMergesAsStrings) {
  Tokenizer strings = tiny();
  Tokenizer pairs = tiny({.merges_as_pairs = true});
  const std::string text = "hello the abc it's aaaa, inn<|endoftext|>";
  EXPECT_EQ(strings.encode(text), pairs.encode(text));
  EXPECT_EQ(pairs.encode("hello"), (Ids{262, 111}));
}

TEST(Tokenizer, AddPrefixSpaceAppliesToEachTextBetweenAddedTokens) {
  Tokenizer tok = tiny({.add_prefix_space = true});
  EXPECT_EQ(tok.encode("hello the"), (Ids{32, 262, 111, 258}));
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (Ids{260, 269, 32, 98}));
  EXPECT_EQ(tok.encode(" x"), (Ids{32, 120}));  // already starts with a space: none added
}

TEST(Tokenizer, AddPrefixSpaceAfterASplitAppliesToEachPreToken) {
  Tokenizer tok = tiny({.llama3 = true, .add_prefix_space = true});
  // Pre-tokens "x", "\n\n", "y", " ", "12" each get a space unless they start with one.
  EXPECT_EQ(tok.encode("x\n\ny 12"), (Ids{32, 120, 32, 10, 10, 32, 121, 32, 32, 49, 50}));
  EXPECT_EQ(tok.encode("hello the abc"), (Ids{32, 262, 111, 258, 260, 265}));
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (Ids{260, 269, 32, 98}));
}

TEST(Tokenizer, Llama3PatternAndIgnoreMerges) {
  Tokenizer tok = tiny({.llama3 = true});
  // 'S is a contraction under (?i:...); digits go in threes.
  EXPECT_EQ(tok.encode("hello the abc it'S aaaa"), (Ids{262, 111, 258, 260, 265, 32, 105, 116, 39, 83, 260, 263, 97}));
  EXPECT_EQ(tok.encode("abc 12345"), (Ids{97, 265, 32, 49, 50, 51, 52, 53}));
  // ignore_merges: a pre-token that is itself in the vocabulary ("abc", 268, made by no merge) is one token.
  Tokenizer ignoring = tiny({.llama3 = true, .ignore_merges = true});
  EXPECT_EQ(ignoring.encode("abc 12345"), (Ids{268, 32, 49, 50, 51, 52, 53}));
  EXPECT_EQ(ignoring.encode("aaaa"), (Ids{264}));
}

TEST(Tokenizer, DecodeInvertsEncodeOnRandomUtf8) {
  std::mt19937_64 rng(20240520);
  const char32_t pools[][2] = {{0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x24F}, {0x370, 0x52F}, {0x3040, 0x30FF},
                               {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF}, {0x80, 0xD7FF},
                               {0xE000, 0x10FFFF}};
  const std::vector<std::string> pieces = {"'s", "'LL", "<|endoftext|>", "\r\n", "   ", "123456", "aaaa", " the"};
  for (bool llama3 : {false, true}) {
    Tokenizer tok = tiny({.llama3 = llama3});
    std::size_t tokens = 0;
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      const int length = std::uniform_int_distribution<int>(0, 60)(rng);
      for (int i = 0; i < length; ++i) {
        if (rng() % 8 == 0) {
          text += pieces[rng() % pieces.size()];
          continue;
        }
        const auto& pool = pools[rng() % std::size(pools)];
        char32_t cp = std::uniform_int_distribution<char32_t>(pool[0], pool[1])(rng);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        append_utf8(cp, text);
      }
      ASSERT_EQ(first_invalid_utf8(text), text.size());
      const Ids ids = tok.encode(text);
      tokens += ids.size();
      for (std::int32_t id : ids) ASSERT_TRUE(tok.has_token(id)) << id;
      ASSERT_EQ(tok.decode(ids), text) << "trial " << trial << (llama3 ? " (Llama 3)" : " (GPT-2)");
    }
    EXPECT_GT(tokens, 2000u);
  }
}

TEST(Tokenizer, CacheGivesTheSameIdsAsAFreshTokenizer) {
  Tokenizer warm = tiny();
  const std::string text = "hello the abc it's aaaa hello hello the the aaaa";
  const Ids first = warm.encode(text);
  EXPECT_EQ(warm.encode(text), first);
  EXPECT_EQ(tiny().encode(text), first);
}

TEST(Tokenizer, RefusesInvalidUtf8AndUnknownIds) {
  Tokenizer tok = tiny();
  try {
    tok.encode(std::string("ab\xC3(", 4));
    FAIL() << "invalid UTF-8 was encoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(tok.has_token(270));
  EXPECT_THROW(tok.decode(Ids{104, 270}), Error);
  EXPECT_THROW(tok.decode(Ids{-1}), Error);
  EXPECT_EQ(tok.decode(Ids{262, 111, 269}), "hello<|endoftext|>");
  EXPECT_EQ(tok.token_bytes(258), " the");
  EXPECT_EQ(tok.added_token_id("<|endoftext|>"), 269);
  EXPECT_FALSE(tok.added_token_id("<|eot|>").has_value());
}

}  // namespace
}  // namespace cleave::tokenizer::tokenizer_test
