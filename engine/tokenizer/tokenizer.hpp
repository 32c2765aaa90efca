// A byte-level BPE tokenizer (GPT-2, Llama 3 and tokenizers trained like them), encoding to the same ids as
// Hugging Face `tokenizers` does for `encode(text, add_special_tokens=False)` and decoding ids to bytes.
//
//   encode: text -> added tokens split out (added_tokens.hpp) -> pre-tokens (pre_tokenizer.hpp, with
//           ByteLevel's add_prefix_space) -> each pre-token's bytes merged by BPE (bpe.hpp), through the
//           merge cache (word_cache.hpp).
//   decode: ids -> each token's bytes (byte_level.hpp; an added token's own text) -> concatenated.
//
// Invariants: the tables are immutable after construction, which checked every merge and id (a Tokenizer
// that exists is consistent); decode(encode(x)) == x for every valid UTF-8 x. encode() is not const and not
// thread-safe: it fills the merge cache (one Tokenizer per thread). No post-processor runs: the template
// tokens a post_processor would add (a Llama 3 BOS) are not added.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/added_tokens.hpp"
#include "engine/tokenizer/bpe.hpp"
#include "engine/tokenizer/pre_tokenizer.hpp"
#include "engine/tokenizer/word_cache.hpp"

namespace cleave::tokenizer {

// What a tokenizer.json says, after its keys were read and checked (tokenizer_json.hpp).
struct TokenizerSpec {
  std::string source;  // for messages: "tokenizer data/tokenizer.json"
  std::vector<std::pair<std::string, std::int32_t>> vocab;  // model.vocab: byte-level strings and ids
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, in rank order
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token (Llama 3)
  SplitPattern pattern = SplitPattern::kGpt2;
  // false: ByteLevel(use_regex=true) splits, add_prefix_space applies to each text between added tokens;
  // true: Sequence[Split(pattern), ByteLevel(use_regex=false)], add_prefix_space applies to each pre-token.
  bool split_before_byte_level = false;
  bool add_prefix_space = false;
  std::vector<AddedToken> added_tokens;
};

class Tokenizer {
 public:
  // Throws Error naming spec.source and the key for an inconsistent spec: a merge whose parts or result are
  // not in the vocabulary, a byte missing from the vocabulary, an id used twice, a negative id.
  explicit Tokenizer(TokenizerSpec spec);

  // Called with the bytes of `text` encoded so far, about every MiB.
  using Progress = std::function<void(std::size_t bytes_done)>;
  // Appends the ids of `text` to `out`. Throws Error when the text is not valid UTF-8 (naming the offset).
  void encode(std::string_view text, std::vector<std::int32_t>& out, const Progress& progress = {});
  std::vector<std::int32_t> encode(std::string_view text);

  // The bytes of `ids` concatenated (not necessarily valid UTF-8 for a slice of a longer sequence). Throws
  // Error for an id with no token.
  std::string decode(std::span<const std::int32_t> ids) const;
  bool has_token(std::int32_t id) const;
  std::string_view token_bytes(std::int32_t id) const;  // empty for an id with no token

  std::int32_t vocab_size() const { return static_cast<std::int32_t>(id_bytes_.size()); }  // largest id + 1
  std::optional<std::int32_t> added_token_id(std::string_view content) const;
  const std::string& source() const { return spec_.source; }
  // "byte-level BPE, 50257 tokens, 49999 merges, GPT-2 pre-tokenizer, 1 added token"
  std::string describe() const;

 private:
  void encode_segment(std::string_view segment, std::vector<std::int32_t>& out);
  void encode_word(std::string_view word, std::vector<std::int32_t>& out);
  void encode_between_added(std::string_view text, std::vector<std::int32_t>& out);

  TokenizerSpec spec_;
  std::vector<std::string> id_bytes_;
  std::vector<bool> id_present_;
  std::unique_ptr<BpeMerges> merges_;
  std::unordered_map<std::string, std::int32_t> word_ids_;  // raw bytes -> id (ignore_merges)
  AddedTokenMatcher raw_added_, normalized_added_;
  WordCache cache_;
  BpeMerges::Scratch scratch_;
  std::vector<std::int32_t> word_out_;
  std::string prefixed_;       // a text with add_prefix_space's space (ByteLevel alone)
  std::string prefixed_word_;  // a pre-token with add_prefix_space's space (after a Split)
  // Set for the duration of one encode() call.
  const Progress* progress_ = nullptr;
  const char* text_begin_ = nullptr;
  std::size_t reported_ = 0;
};

}  // namespace cleave::tokenizer
