// A BPE tokenizer of the two kinds Hugging Face models use, encoding to the same ids as Hugging Face
// `tokenizers` does for `encode(text, add_special_tokens=False)` and decoding ids to bytes:
//   byte-level BPE (GPT-2, Llama 3): a ByteLevel pre-tokenizer maps bytes to GPT-2's alphabet; every byte
//     has a token.
//   SentencePiece-style BPE (Llama 2, Mistral, TinyLlama, Gemma): spaces become "▁" (by a Replace/Prepend
//     normalizer or a Metaspace pre-tokenizer); words start as one symbol per character, a character
//     without a token as its bytes' <0xNN> tokens (byte_fallback) or the unknown token.
//
//   encode: text -> added tokens with normalized false split out (added_tokens.hpp) -> each piece
//           normalized (normalizer.hpp) -> added tokens with normalized true split out -> pre-tokens
//           (pre_tokenizer.hpp with ByteLevel's add_prefix_space, or Metaspace) -> each pre-token merged by
//           BPE (bpe.hpp), through the merge cache (word_cache.hpp).
//   decode: ids -> each token's bytes (byte_level.hpp; "▁" as a space and <0xNN> as its byte for
//           SentencePiece-style; an added token's own text) -> concatenated (one leading space stripped when
//           the decoder says so).
//
// Invariants: the tables are immutable after construction, which checked every merge and id (a Tokenizer
// that exists is consistent); byte-level: decode(encode(x)) == x for every valid UTF-8 x. encode() is not
// const and not thread-safe: it fills the merge cache (one Tokenizer per thread). encode() adds no template
// tokens; template_prefix()/template_suffix() give the post_processor's (a Llama BOS) for the caller.
#pragma once

#include <array>
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
#include "engine/tokenizer/normalizer.hpp"
#include "engine/tokenizer/pre_tokenizer.hpp"
#include "engine/tokenizer/word_cache.hpp"

namespace cleave::tokenizer {

enum class TokenizerKind { kByteLevel, kSentencePiece };

// What a tokenizer.json says, after its keys were read and checked (tokenizer_json.hpp).
struct TokenizerSpec {
  std::string source;  // for messages: "tokenizer data/tokenizer.json"
  TokenizerKind kind = TokenizerKind::kByteLevel;
  std::vector<std::pair<std::string, std::int32_t>> vocab;  // model.vocab: strings and ids
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, in rank order
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token (Llama 3)
  SplitPattern pattern = SplitPattern::kGpt2;
  // false: ByteLevel(use_regex=true) splits, add_prefix_space applies to each text between added tokens;
  // true: Sequence[Split(pattern), ByteLevel(use_regex=false)], add_prefix_space applies to each pre-token.
  bool split_before_byte_level = false;
  bool add_prefix_space = false;
  std::vector<AddedToken> added_tokens;
  std::vector<NormalizerStep> normalizer;  // empty: none
  // SentencePiece-style only.
  std::optional<MetaspaceSpec> metaspace;  // pre_tokenizer Metaspace; none: each piece is one word
  bool byte_fallback = false;              // a character without a token -> its bytes' <0xNN> tokens
  std::string unk_token;                   // model.unk_token ("" when null): a character with no token
  bool fuse_unk = false;                   // consecutive unknown characters are one unknown token
  std::string decode_space;                // the decoder turns this ("▁") into ' ' ("" for byte-level)
  bool decode_byte_fallback = false;       // the decoder turns <0xNN> into the byte
  bool decode_strip_space = false;         // the decoder strips one leading space of the text
  // post_processor TemplateProcessing "single": the ids before and after one sequence ($A).
  std::vector<std::int32_t> template_prefix, template_suffix;
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
  // The text `tokenizers`' decode prints for `ids` (its ByteFallback, Fuse and Strip decoders, then
  // from_utf8_lossy): decode()'s bytes, except that a run of <0xNN> byte-fallback tokens whose bytes are not UTF-8
  // prints one U+FFFD per token, other bytes that are not UTF-8 one U+FFFD per maximal invalid subpart, and an id with
  // no token prints as `missing(id)` (tokenizers drops it) and ends a run.
  std::string decode_printable(std::span<const std::int32_t> ids,
                               const std::function<std::string(std::int32_t)>& missing) const;

  std::int32_t vocab_size() const { return static_cast<std::int32_t>(id_bytes_.size()); }  // largest id + 1
  std::optional<std::int32_t> added_token_id(std::string_view content) const;
  const std::vector<AddedToken>& added_tokens() const { return spec_.added_tokens; }  // in tokenizer.json's order
  const std::string& source() const { return spec_.source; }
  TokenizerKind kind() const { return spec_.kind; }
  // The post_processor's template tokens around one sequence (Llama's BOS <s>); empty when none.
  const std::vector<std::int32_t>& template_prefix() const { return spec_.template_prefix; }
  const std::vector<std::int32_t>& template_suffix() const { return spec_.template_suffix; }
  // "byte-level BPE, 50257 tokens, 49999 merges, GPT-2 pre-tokenizer, 1 added token"
  std::string describe() const;

 private:
  void encode_segment(std::string_view segment, bool at_text_start, std::vector<std::int32_t>& out);
  void encode_word(std::string_view word, std::vector<std::int32_t>& out);
  void merge_characters(std::string_view word, std::vector<std::int32_t>& out);
  void encode_between_added(std::string_view text, bool at_text_start, std::vector<std::int32_t>& out);

  TokenizerSpec spec_;
  std::vector<std::string> id_bytes_;
  std::vector<bool> id_present_;
  std::unique_ptr<BpeMerges> merges_;
  std::unordered_map<std::string, std::int32_t> word_ids_;  // raw bytes -> id (ignore_merges)
  // SentencePiece-style: one-character tokens by code point, <0xNN> tokens by byte (-1: none), unk_token's id.
  std::unordered_map<char32_t, std::int32_t> char_ids_;
  std::array<std::int32_t, 256> fallback_ids_{};
  std::int32_t unk_id_ = -1;
  std::vector<std::string> sp_words_;
  // SentencePiece-style with no Metaspace split: the word may still be cut before each "▁" (exact when "▁" is a
  // token and no token holds "▁" after its start, so no merge can cross the cut; not under ignore_merges), which
  // lets the cache work.
  std::string safe_cut_;  // "" when cutting is not exact
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
