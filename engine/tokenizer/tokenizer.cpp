// The tokenizer (see tokenizer.hpp): building the tables from a spec, encoding and decoding.
#include "engine/tokenizer/tokenizer.hpp"

#include <unordered_map>

#include "engine/core/error.hpp"
#include "engine/tokenizer/byte_level.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {
namespace {

constexpr std::size_t kProgressEvery = std::size_t{1} << 20;
constexpr std::size_t kCacheMaxBytes = 256;

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

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  const std::string& what = spec_.source;
  const bool byte_level = spec_.kind == TokenizerKind::kByteLevel;
  const ByteLevelAlphabet alphabet;
  const auto token_bytes_of = [&](const std::string& token) { return decoded_bytes(spec_, alphabet, token); };
  std::int32_t max_id = -1;
  for (const auto& [token, id] : spec_.vocab) max_id = std::max(max_id, id);
  for (const auto& added : spec_.added_tokens) max_id = std::max(max_id, added.id);
  CLEAVE_CHECK(max_id >= 0, "{}: model.vocab is empty", what);
  id_bytes_.resize(static_cast<std::size_t>(max_id) + 1);
  id_present_.assign(id_bytes_.size(), false);

  TokenIds ids;
  ids.reserve(spec_.vocab.size());
  for (const auto& [token, id] : spec_.vocab) {
    CLEAVE_CHECK(id >= 0, "{}: model.vocab[\"{}\"] is {}; ids must be >= 0", what, printable(token), id);
    CLEAVE_CHECK(!id_present_[id], "{}: model.vocab gives id {} to two tokens (\"{}\" and \"{}\")", what, id,
                 printable(token), printable(id_bytes_[id]));
    CLEAVE_CHECK(!token.empty(), "{}: model.vocab has an empty token (id {})", what, id);
    id_present_[id] = true;
    id_bytes_[id] = token_bytes_of(token);
    ids.emplace(token, id);
  }

  std::array<std::int32_t, 256> byte_ids{};
  fallback_ids_.fill(-1);
  if (!byte_level) {
    for (int b = 0; b < 256; ++b) {
      const auto it = ids.find(fmt::format("<0x{:02X}>", b));
      if (it != ids.end()) fallback_ids_[b] = it->second;
    }
    for (const auto& [token, id] : spec_.vocab) {
      const CodePoint cp = decode_utf8(token, 0);
      if (cp.bytes == token.size()) char_ids_.emplace(cp.value, id);
    }
    if (!spec_.unk_token.empty()) {
      const auto it = ids.find(spec_.unk_token);
      CLEAVE_CHECK(it != ids.end(), "{}: model.unk_token \"{}\" is not in model.vocab; the file is inconsistent",
                   what, printable(spec_.unk_token));
      unk_id_ = it->second;
    }
  } else {
    byte_ids = byte_token_ids(what, ids, alphabet);
  }

  merges_ = build_merges(spec_, ids, byte_ids);
  if (!byte_level) safe_cut_ = exact_cut(spec_, ids);
  if (spec_.ignore_merges) {
    for (const auto& [token, id] : spec_.vocab) {
      if (!byte_level) word_ids_.emplace(token, id);
      else if (auto bytes = alphabet.to_bytes(token)) word_ids_.emplace(std::move(*bytes), id);
    }
  }
  check_added_token_ids(spec_, ids, id_present_, id_bytes_);
  for (const AddedToken& added : spec_.added_tokens) {
    id_present_[added.id] = true;
    // `tokenizers` decodes a normalized added token as its normalized content ("ab cd" -> "▁ab▁cd" -> " ab cd").
    id_bytes_[added.id] = byte_level        ? token_bytes_of(added.content)
                          : added.normalized ? token_bytes_of(normalize(spec_.normalizer, added.content))
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

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) {
  std::vector<std::int32_t> out;
  encode(text, out);
  return out;
}

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out, const Progress& progress) {
  const std::size_t bad = first_invalid_utf8(text);
  CLEAVE_CHECK(bad == text.size(), "tokenizer: the text is not valid UTF-8 at byte {} (0x{:02x}); cleave encodes UTF-8 text",
               bad, bad < text.size() ? static_cast<unsigned char>(text[bad]) : 0);
  // Tokens whose "normalized" is false split the text first; the pieces between them are split by the others.
  progress_ = progress ? &progress : nullptr;
  text_begin_ = text.data();
  reported_ = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto m = raw_added_.find(text, pos);
    const std::size_t gap_end = m ? m->begin : text.size();
    if (gap_end > pos) {
      if (spec_.normalizer.empty()) {
        encode_between_added(text.substr(pos, gap_end - pos), pos == 0, out);
      } else {
        encode_between_added(normalize(spec_.normalizer, text.substr(pos, gap_end - pos)), pos == 0, out);
        if (progress_ != nullptr && gap_end - reported_ >= kProgressEvery) progress(reported_ = gap_end);
      }
    }
    if (m) out.push_back(m->id);
    pos = m ? m->end : text.size();
  }
  if (progress_) progress(text.size());
  progress_ = nullptr;
}

void Tokenizer::encode_between_added(std::string_view text, bool at_text_start, std::vector<std::int32_t>& out) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto m = normalized_added_.find(text, pos);
    const std::size_t gap_end = m ? m->begin : text.size();
    if (gap_end > pos) encode_segment(text.substr(pos, gap_end - pos), at_text_start && pos == 0, out);
    if (m) out.push_back(m->id);
    pos = m ? m->end : text.size();
  }
}

void Tokenizer::encode_segment(std::string_view segment, bool at_text_start, std::vector<std::int32_t>& out) {
  if (spec_.kind == TokenizerKind::kSentencePiece) {
    sp_words_.clear();
    if (spec_.metaspace) metaspace_words(*spec_.metaspace, segment, at_text_start, sp_words_);
    else sp_words_.emplace_back(segment);
    for (const std::string& word : sp_words_) {
      if (safe_cut_.empty() || (spec_.metaspace && spec_.metaspace->split)) {
        encode_word(word, out);
        continue;
      }
      const std::string_view w(word);
      std::size_t begin = 0;
      for (std::size_t hit = w.find(safe_cut_, 1); hit != std::string_view::npos; hit = w.find(safe_cut_, hit + safe_cut_.size())) {
        if (hit > begin) encode_word(w.substr(begin, hit - begin), out);
        begin = hit;
      }
      encode_word(w.substr(begin), out);
    }
    if (progress_ != nullptr && spec_.normalizer.empty()) {
      const auto end = static_cast<std::size_t>(segment.data() + segment.size() - text_begin_);
      if (end - reported_ >= kProgressEvery) (*progress_)(reported_ = end);
    }
    return;
  }
  // Offsets into normalized text are not the text's: encode() reports progress per piece then.
  const bool report = progress_ != nullptr && spec_.normalizer.empty();
  const bool prefix_each_word = spec_.add_prefix_space && spec_.split_before_byte_level;
  // Where segment[0] lies in the text passed to encode(), for progress reports.
  std::size_t text_offset = report ? static_cast<std::size_t>(segment.data() - text_begin_) : 0;
  if (spec_.add_prefix_space && !spec_.split_before_byte_level && segment[0] != ' ') {
    prefixed_.assign(1, ' ');
    prefixed_.append(segment);
    segment = prefixed_;
    --text_offset;  // the added space is not in the text
  }
  for (std::size_t pos = 0; pos < segment.size();) {
    const std::size_t end = pre_token_end(spec_.pattern, segment, pos);
    std::string_view word = segment.substr(pos, end - pos);
    if (prefix_each_word && word[0] != ' ') {
      prefixed_word_.assign(1, ' ');
      prefixed_word_.append(word);
      encode_word(prefixed_word_, out);
    } else {
      encode_word(word, out);
    }
    pos = end;
    if (report && text_offset + pos - reported_ >= kProgressEvery) (*progress_)(reported_ = text_offset + pos);
  }
}

void Tokenizer::encode_word(std::string_view word, std::vector<std::int32_t>& out) {
  // Long words (a whole text under a SentencePiece-style tokenizer with no pre-tokenizer) are not cached,
  // as `tokenizers` caches words under 256 bytes.
  const bool cacheable = word.size() < kCacheMaxBytes;
  const std::uint64_t hash = cacheable ? WordCache::hash(word) : 0;
  if (cacheable) {
    const auto cached = cache_.find(word, hash);
    if (!cached.empty()) {
      out.insert(out.end(), cached.begin(), cached.end());
      return;
    }
  }
  word_out_.clear();
  const auto whole = spec_.ignore_merges ? word_ids_.find(std::string(word)) : word_ids_.end();
  if (whole != word_ids_.end()) word_out_.push_back(whole->second);
  else if (spec_.kind == TokenizerKind::kByteLevel) merges_->merge_word(word, scratch_, word_out_);
  else merge_characters(word, word_out_);
  if (cacheable && !word_out_.empty()) cache_.insert(word, hash, word_out_);
  out.insert(out.end(), word_out_.begin(), word_out_.end());
}

// `tokenizers`' BPE::merge_word: one symbol per character; a character without a token becomes its bytes'
// <0xNN> tokens when all exist (byte_fallback), else the unknown token (runs fused under fuse_unk), else
// nothing.
void Tokenizer::merge_characters(std::string_view word, std::vector<std::int32_t>& out) {
  BpeMerges::start_word(scratch_);
  std::uint32_t unk_bytes = 0;  // > 0: an unknown symbol is pending
  for (std::size_t pos = 0; pos < word.size();) {
    const CodePoint cp = decode_utf8(word, pos);
    const auto len = static_cast<std::uint32_t>(cp.bytes);
    const auto it = char_ids_.find(cp.value);
    if (it != char_ids_.end()) {
      if (unk_bytes > 0) BpeMerges::add_symbol(scratch_, unk_id_, unk_bytes), unk_bytes = 0;
      BpeMerges::add_symbol(scratch_, it->second, len);
    } else {
      bool fell_back = spec_.byte_fallback;
      for (std::size_t i = 0; fell_back && i < len; ++i) fell_back = fallback_ids_[static_cast<unsigned char>(word[pos + i])] >= 0;
      if (fell_back) {
        // As `tokenizers` does, a pending unknown token is not flushed first: it follows the bytes.
        for (std::size_t i = 0; i < len; ++i) BpeMerges::add_symbol(scratch_, fallback_ids_[static_cast<unsigned char>(word[pos + i])], 1);
      } else if (unk_id_ >= 0) {
        if (unk_bytes > 0 && !spec_.fuse_unk) BpeMerges::add_symbol(scratch_, unk_id_, unk_bytes), unk_bytes = 0;
        unk_bytes += len;
      }
    }
    pos += len;
  }
  if (unk_bytes > 0) BpeMerges::add_symbol(scratch_, unk_id_, unk_bytes);
  if (!scratch_.symbols.empty()) merges_->merge_symbols(scratch_, out);
}

bool Tokenizer::has_token(std::int32_t id) const {
  return id >= 0 && id < vocab_size() && id_present_[static_cast<std::size_t>(id)];
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  return has_token(id) ? std::string_view(id_bytes_[static_cast<std::size_t>(id)]) : std::string_view();
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CLEAVE_CHECK(has_token(ids[i]), "{}: cannot decode id {} (position {}): the tokenizer has no token with that id "
                 "(vocabulary of {})", spec_.source, ids[i], i, vocab_size());
    out.append(id_bytes_[static_cast<std::size_t>(ids[i])]);
  }
  if (spec_.decode_strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::optional<std::int32_t> Tokenizer::added_token_id(std::string_view content) const {
  for (const AddedToken& added : spec_.added_tokens) {
    if (added.content == content) return added.id;
  }
  return std::nullopt;
}

std::string Tokenizer::describe() const {
  const std::string added =
      fmt::format("{} added token{}", spec_.added_tokens.size(), spec_.added_tokens.size() == 1 ? "" : "s");
  if (spec_.kind == TokenizerKind::kByteLevel) {
    return fmt::format("byte-level BPE, {} tokens, {} merges, {} pre-tokenizer, {}", vocab_size(), spec_.merges.size(),
                       split_pattern_name(spec_.pattern), added);
  }
  std::string steps;
  for (const NormalizerStep& step : spec_.normalizer) {
    steps += fmt::format("{}{}", steps.empty() ? "" : "+", normalizer_step_name(step));
  }
  return fmt::format("SentencePiece-style BPE, {} tokens, {} merges, {}, {}{}, {}", vocab_size(), spec_.merges.size(),
                     steps.empty() ? "no normalizer" : "normalizer " + steps,
                     spec_.metaspace ? fmt::format("Metaspace pre-tokenizer (prepend {}{})",
                                                   prepend_scheme_name(spec_.metaspace->prepend),
                                                   spec_.metaspace->split ? ", split" : "")
                                     : "no pre-tokenizer",
                     spec_.byte_fallback ? ", byte fallback" : "", added);
}

}  // namespace cleave::tokenizer
