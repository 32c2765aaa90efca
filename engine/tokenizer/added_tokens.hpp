// Added tokens (tokenizer.json "added_tokens", e.g. "<|endoftext|>"): strings matched in the raw text before
// pre-tokenization and encoded as their own id, as Hugging Face `tokenizers`' AddedVocabulary does.
//
// Invariant: find() returns the leftmost match, the longest one at that position (aho-corasick's
// LeftmostLongest), of one group. `tokenizers` splits the text with the tokens whose "normalized" is false
// first, then the pieces between with the "normalized" ones; with no normalizer (the only kind accepted)
// both see the same text, so the two groups and that order are all that is kept.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cleave::tokenizer {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool special = false;
  bool normalized = false;
};

// One group of added tokens.
class AddedTokenMatcher {
 public:
  void add(std::string content, std::int32_t id);
  bool empty() const { return tokens_.empty(); }
  struct Match {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::int32_t id = 0;
  };
  // The leftmost-longest match starting at or after `from`, if any.
  std::optional<Match> find(std::string_view text, std::size_t from) const;

 private:
  struct Entry {
    std::string content;
    std::int32_t id;
  };
  std::vector<Entry> tokens_;                     // longest first
  std::array<std::vector<std::uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace cleave::tokenizer
