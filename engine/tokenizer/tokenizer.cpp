// The tokenizer (see tokenizer.hpp): encoding and decoding with the tables tokenizer_build.cpp builds.
#include "engine/tokenizer/tokenizer.hpp"

#include <unordered_map>

#include "engine/core/error.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {
namespace {

constexpr std::size_t kProgressEvery = std::size_t{1} << 20;
constexpr std::size_t kCacheMaxBytes = 256;

}  // namespace

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

std::string Tokenizer::decode_printable(std::span<const std::int32_t> ids,
                                        const std::function<std::string(std::int32_t)>& missing) const {
  std::string out, run;  // run: the bytes of consecutive byte-fallback tokens, decoded together
  std::size_t run_tokens = 0;
  const auto flush = [&] {
    if (run_tokens == 0) return;
    if (lossy_utf8(run) == run) {
      out += run;
    } else {
      for (std::size_t i = 0; i < run_tokens; ++i) out += "\xEF\xBF\xBD";  // U+FFFD per token, as ByteFallback
    }
    run.clear();
    run_tokens = 0;
  };
  for (const std::int32_t id : ids) {
    if (!has_token(id)) {
      flush();
      out += missing(id);
      continue;
    }
    const std::string& bytes = id_bytes_[static_cast<std::size_t>(id)];
    const bool fallback = spec_.decode_byte_fallback && bytes.size() == 1 &&
                          fallback_ids_[static_cast<unsigned char>(bytes[0])] == id;
    if (fallback) {
      run += bytes;
      ++run_tokens;
      continue;
    }
    flush();
    out += bytes;
  }
  flush();
  if (spec_.decode_strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return lossy_utf8(out);
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
