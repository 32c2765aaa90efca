// A tiny GPT-2-style byte-level BPE tokenizer.json, built in code for the tokenizer tests: the 256 byte
// tokens (id = byte value), twelve merges (ids 256-267, rank = id - 256), an unmerged vocabulary word "abc"
// (268, reachable only with ignore_merges) and the special token "<|endoftext|>" (269, the id `tokenizers`
// gives it: the next after the vocabulary's 269 entries). The ids the tests
// expect were worked by hand and checked once against `tokenizers` 0.23.3 (not needed to run the tests).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::tokenizer::testing {

inline std::string byte_token(int b) {
  // bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for U+0100 + k in byte order.
  int k = 0;
  for (int c = 0; c < b; ++c) {
    if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) ++k;
  }
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + k);
  std::string out;
  if (cp < 0x80) out += static_cast<char>(cp);
  else out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
  return out;
}

inline const std::vector<std::pair<std::string, std::string>>& tiny_merges() {
  static const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"},  {"Ġ", "a"}, {"l", "l"},
      {"he", "ll"}, {"a", "a"}, {"aa", "aa"}, {"b", "c"}, {"a", "b"}, {"'", "s"}};
  return merges;
}

inline const char* gpt2_regex() { return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"; }
inline const char* llama3_regex() {
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

struct TinyOptions {
  bool llama3 = false;           // Sequence [Split(Llama 3 pattern), ByteLevel(use_regex false)]
  bool add_prefix_space = false;
  bool ignore_merges = false;
  bool merges_as_pairs = false;  // [["a", "b"], ...] instead of "a b"
};

inline nlohmann::json tiny_tokenizer_json(const TinyOptions& o = {}) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
  json merges = json::array();
  int id = 256;
  for (const auto& [a, b] : tiny_merges()) {
    vocab[a + b] = id++;
    merges.push_back(o.merges_as_pairs ? json::array({a, b}) : json(a + " " + b));
  }
  vocab["abc"] = 268;
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", o.add_prefix_space}, {"trim_offsets", true},
                     {"use_regex", !o.llama3}};
  json pre = byte_level;
  if (o.llama3) {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            json::array({{{"type", "Split"}, {"pattern", {{"Regex", llama3_regex()}}}, {"behavior", "Isolated"},
                          {"invert", false}},
                         byte_level})}};
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({{{"id", 269}, {"content", "<|endoftext|>"}, {"single_word", false},
                                         {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                         {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
            {"ignore_merges", o.ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace cleave::tokenizer::testing
