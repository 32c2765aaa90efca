// The tokenizer's tables built from a TokenizerSpec (Tokenizer's constructor; tokenizer.hpp): ids by token, bytes by
// id, the merges, SentencePiece-style's byte-fallback, character and unknown ids, and the added tokens' matchers.
// Invariant: every id and merge of the spec is checked here, so a Tokenizer that exists is consistent; a file that
// `tokenizers` would read differently (an added token's id, a merge outside the vocabulary) is refused by name.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "engine/core/error.hpp"
#include "engine/tokenizer/byte_level.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {
namespace {

std::string replace_all(const std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t pos = 0;
  for (std::size_t hit = text.find(from); hit != std::string::npos; hit = text.find(from, pos)) {
    out.append(text, pos, hit - pos).append(to);
    pos = hit + from.size();
  }
  return out.append(text, pos);
}

// The byte of a "<0xNN>" byte-fallback token (hex digits upper case, as `tokenizers` writes them), else -1.
int fallback_byte(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

// A token's bytes as the decoder writes them. The ByteLevel decoder's rule: a token whose characters are all in the
// alphabet stands for their bytes, any other for its own UTF-8 text. SentencePiece-style: "▁" is a space, <0xNN> its
// byte.
std::string decoded_bytes(const TokenizerSpec& spec, const ByteLevelAlphabet& alphabet, const std::string& token) {
  if (spec.kind == TokenizerKind::kByteLevel) return alphabet.to_bytes(token).value_or(token);
  if (spec.decode_byte_fallback) {
    if (const int b = fallback_byte(token); b >= 0) return std::string(1, static_cast<char>(b));
  }
  return spec.decode_space.empty() ? token : replace_all(token, spec.decode_space, " ");
}

using TokenIds = std::unordered_map<std::string, std::int32_t>;

// Byte-level: the id of each byte's one-character token; a vocabulary without all 256 is refused.
std::array<std::int32_t, 256> byte_token_ids(const std::string& what, const TokenIds& ids,
                                             const ByteLevelAlphabet& alphabet) {
  std::array<std::int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const std::string token = alphabet.to_token(std::string(1, static_cast<char>(b)));
    const auto it = ids.find(token);
    CLEAVE_CHECK(it != ids.end(),
                 "{}: model.vocab has no token for byte 0x{:02x} (\"{}\"): not a byte-level vocabulary (cleave "
                 "supports byte-level BPE, whose vocabulary holds all 256 bytes)",
                 what, b, token);
    byte_ids[b] = it->second;
  }
  return byte_ids;
}

// The merges as rank-ordered id pairs; a merge naming a token outside the vocabulary is refused.
std::unique_ptr<BpeMerges> build_merges(const TokenizerSpec& spec, const TokenIds& ids,
                                        const std::array<std::int32_t, 256>& byte_ids) {
  const std::string& what = spec.source;
  auto merges = std::make_unique<BpeMerges>(byte_ids);
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& left = spec.merges[rank].first;  // not a structured binding: clang 14 cannot capture one
    const std::string& right = spec.merges[rank].second;
    const auto find = [&](const std::string& token) {
      const auto it = ids.find(token);
      CLEAVE_CHECK(it != ids.end(), "{}: model.merges[{}] (\"{} {}\"): \"{}\" is not in model.vocab", what, rank,
                   printable(left), printable(right), printable(token));
      return it->second;
    };
    const std::int32_t left_id = find(left);  // in this order, so the message names the first missing part
    const std::int32_t right_id = find(right);
    merges->add(left_id, right_id, static_cast<std::uint32_t>(rank), find(left + right));
  }
  return merges;
}

// SentencePiece-style: the replacement character ("▁") when cutting a word before each one is exact, else "".
std::string exact_cut(const TokenizerSpec& spec, const TokenIds& ids) {
  const std::string rep = spec.metaspace ? spec.metaspace->replacement : spec.decode_space;
  // ignore_merges would look up each cut piece whole, where `tokenizers` looks up the uncut word: no cutting.
  bool exact = !rep.empty() && ids.count(rep) > 0 && !spec.ignore_merges;
  for (const auto& [token, id] : spec.vocab) {
    if (!exact) break;
    exact = token.find(rep, 1) == std::string::npos;
  }
  return exact ? rep : std::string();
}

// `tokenizers` does not take an added token's id from the file: a token in model.vocab keeps its vocabulary id,
// any other gets the next id after the vocabulary's entries and the added tokens before it (AddedVocabulary::
// add_tokens). A file whose ids disagree would encode differently there, so it is refused.
void check_added_token_ids(const TokenizerSpec& spec, const TokenIds& ids, const std::vector<bool>& id_present,
                           const std::vector<std::string>& id_bytes) {
  const std::string& what = spec.source;
  const auto vocab_entries = static_cast<std::int32_t>(spec.vocab.size());
  std::int32_t max_added = -1;
  TokenIds added_ids;
  for (std::size_t i = 0; i < spec.added_tokens.size(); ++i) {
    const AddedToken& added = spec.added_tokens[i];
    CLEAVE_CHECK(!added.content.empty(), "{}: added_tokens[{}] (id {}) has an empty content", what, i, added.id);
    const auto in_vocab = ids.find(added.content);
    const auto earlier = added_ids.find(added.content);
    const std::int32_t expected = in_vocab != ids.end() ? in_vocab->second
                                  : earlier != added_ids.end() ? earlier->second
                                  : max_added >= vocab_entries ? max_added + 1
                                                               : vocab_entries;
    CLEAVE_CHECK(added.id == expected,
                 "{}: added_tokens[{}] (\"{}\") has id {}, but `tokenizers` gives it id {} ({}); the file is "
                 "inconsistent (was it edited by hand?)",
                 what, i, printable(added.content), added.id, expected,
                 in_vocab != ids.end() ? "its id in model.vocab"
                                       : fmt::format("the next id after model.vocab's {} entries and the added "
                                                     "tokens before it", vocab_entries));
    CLEAVE_CHECK(in_vocab != ids.end() || !id_present[expected],
                 "{}: added_tokens[{}] (\"{}\") has id {}, which model.vocab gives to \"{}\"; the file is inconsistent",
                 what, i, printable(added.content), expected, printable(id_bytes[expected]));
    added_ids.emplace(added.content, expected);
    max_added = std::max(max_added, expected);
  }
}

// The vocabulary indexed: each token's id, and per id whether a token has it and the bytes it decodes to.
struct VocabIndex {
  TokenIds ids;
  std::vector<std::string> id_bytes;
  std::vector<bool> id_present;
};

VocabIndex index_vocab(const TokenizerSpec& spec, const ByteLevelAlphabet& alphabet) {
  const std::string& what = spec.source;
  std::int32_t max_id = -1;
  for (const auto& [token, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const auto& added : spec.added_tokens) max_id = std::max(max_id, added.id);
  CLEAVE_CHECK(max_id >= 0, "{}: model.vocab is empty", what);
  VocabIndex out;
  out.id_bytes.resize(static_cast<std::size_t>(max_id) + 1);
  out.id_present.assign(out.id_bytes.size(), false);
  out.ids.reserve(spec.vocab.size());
  for (const auto& [token, id] : spec.vocab) {
    CLEAVE_CHECK(id >= 0, "{}: model.vocab[\"{}\"] is {}; ids must be >= 0", what, printable(token), id);
    CLEAVE_CHECK(!out.id_present[id], "{}: model.vocab gives id {} to two tokens (\"{}\" and \"{}\")", what, id,
                 printable(token), printable(out.id_bytes[id]));
    CLEAVE_CHECK(!token.empty(), "{}: model.vocab has an empty token (id {})", what, id);
    out.id_present[id] = true;
    out.id_bytes[id] = decoded_bytes(spec, alphabet, token);
    out.ids.emplace(token, id);
  }
  return out;
}

// SentencePiece-style: the id of each byte's <0xNN> token (-1: none).
std::array<std::int32_t, 256> fallback_token_ids(const TokenIds& ids) {
  std::array<std::int32_t, 256> fallback{};
  fallback.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(fmt::format("<0x{:02X}>", b));
    if (it != ids.end()) fallback[b] = it->second;
  }
  return fallback;
}

// SentencePiece-style: the one-character tokens' ids by code point.
std::unordered_map<char32_t, std::int32_t> char_token_ids(const TokenizerSpec& spec) {
  std::unordered_map<char32_t, std::int32_t> char_ids;
  for (const auto& [token, id] : spec.vocab) {
    const CodePoint cp = decode_utf8(token, 0);
    if (cp.bytes == token.size()) char_ids.emplace(cp.value, id);
  }
  return char_ids;
}

// SentencePiece-style: model.unk_token's id (-1 without one); one outside the vocabulary is refused.
std::int32_t unk_token_id(const TokenizerSpec& spec, const TokenIds& ids) {
  if (spec.unk_token.empty()) return -1;
  const auto it = ids.find(spec.unk_token);
  CLEAVE_CHECK(it != ids.end(), "{}: model.unk_token \"{}\" is not in model.vocab; the file is inconsistent",
               spec.source, printable(spec.unk_token));
  return it->second;
}

// ignore_merges: every token's id by its raw bytes, for the whole-word lookup before merging.
std::unordered_map<std::string, std::int32_t> whole_word_ids(const TokenizerSpec& spec,
                                                             const ByteLevelAlphabet& alphabet) {
  std::unordered_map<std::string, std::int32_t> word_ids;
  for (const auto& [token, id] : spec.vocab) {
    if (spec.kind != TokenizerKind::kByteLevel) word_ids.emplace(token, id);
    else if (auto bytes = alphabet.to_bytes(token)) word_ids.emplace(std::move(*bytes), id);
  }
  return word_ids;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  const std::string& what = spec_.source;
  const bool byte_level = spec_.kind == TokenizerKind::kByteLevel;
  const ByteLevelAlphabet alphabet;
  VocabIndex vocab = index_vocab(spec_, alphabet);
  const TokenIds& ids = vocab.ids;
  id_bytes_ = std::move(vocab.id_bytes);
  id_present_ = std::move(vocab.id_present);

  std::array<std::int32_t, 256> byte_ids{};
  fallback_ids_.fill(-1);
  if (!byte_level) {
    fallback_ids_ = fallback_token_ids(ids);
    char_ids_ = char_token_ids(spec_);
    unk_id_ = unk_token_id(spec_, ids);
  } else {
    byte_ids = byte_token_ids(what, ids, alphabet);
  }
  merges_ = build_merges(spec_, ids, byte_ids);
  if (!byte_level) safe_cut_ = exact_cut(spec_, ids);
  if (spec_.ignore_merges) word_ids_ = whole_word_ids(spec_, alphabet);

  check_added_token_ids(spec_, ids, id_present_, id_bytes_);
  for (const AddedToken& added : spec_.added_tokens) {
    id_present_[added.id] = true;
    // `tokenizers` decodes a normalized added token as its normalized content ("ab cd" -> "▁ab▁cd" -> " ab cd").
    id_bytes_[added.id] = byte_level         ? decoded_bytes(spec_, alphabet, added.content)
                          : added.normalized ? decoded_bytes(spec_, alphabet, normalize(spec_.normalizer, added.content))
                                             : added.content;
  }
  for (const auto* side : {&spec_.template_prefix, &spec_.template_suffix}) {
    for (const std::int32_t id : *side) {
      CLEAVE_CHECK(has_token(id), "{}: post_processor adds id {}, which no token has (vocabulary of {}); the file is "
                   "inconsistent", what, id, vocab_size());
    }
  }
  for (const AddedToken& added : spec_.added_tokens) {
    // `tokenizers` matches a normalized added token by its normalized content (AddedVocabulary).
    if (added.normalized) normalized_added_.add(normalize(spec_.normalizer, added.content), added.id);
    else raw_added_.add(added.content, added.id);
  }
}

}  // namespace cleave::tokenizer
