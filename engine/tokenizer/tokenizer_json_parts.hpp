// Internal to reading tokenizer.json (tokenizer_json.hpp): the readers of its keys and sections, one file per
// section (tokenizer_json_keys.cpp, _normalizer.cpp, _pre_tokenizer.cpp, _decoder.cpp, _post_processor.cpp), each
// filling its part of a TokenizerSpec.
//
// Invariant: a reader accepts exactly what cleave implements and refuses anything else with one Error naming the
// file (spec.source or `src`), the JSON key (`where`), what it holds and what is supported; it never guesses.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "engine/tokenizer/tokenizer.hpp"

namespace cleave::tokenizer::json_parts {

using nlohmann::json;

// What cleave supports, appended to a refusal of the model, pre-tokenizer or decoder kind.
inline constexpr std::string_view kSupported =
    "cleave supports BPE tokenizers (model.type \"BPE\") of two kinds: byte-level (GPT-2, Llama 3: pre_tokenizer "
    "ByteLevel or Sequence [Split (GPT-2 or Llama 3 pattern), ByteLevel], decoder ByteLevel) and SentencePiece-style "
    "(Llama 2, Mistral, Gemma: pre_tokenizer Metaspace or null, normalizer null or Prepend/Replace/NFC/NFD/NFKC/NFKD/"
    "Lowercase/Strip/Sequence, decoder "
    "Metaspace or Sequence [Replace, ByteFallback, Fuse, Strip]); see docs/tokenizer.md";

// ---- keys (tokenizer_json_keys.cpp) ----
// A JSON value as a message shows it: its text, cut to 120 characters.
std::string shown(const json& value);
// An optional boolean key: its value, `fallback` when absent or null.
bool flag(const json& object, const char* key, bool fallback, const std::string& where, const std::string& source);
// A required key of `object`.
const json& member(const json& object, const char* key, const std::string& where, const std::string& source);
// The "type" string of a section object.
std::string type_of(const json& object, const std::string& where, const std::string& source);

// ---- sections ----
// The normalizer steps of `n` (a Sequence adds each of its steps in order), appended to spec.normalizer.
void read_normalizer(const json& n, const std::string& where, TokenizerSpec& spec);
// The pre-tokenizer: sets spec.kind, and the split pattern or the Metaspace settings.
void read_pre_tokenizer(const json& pre, TokenizerSpec& spec);
// Metaspace's prepend_scheme as `tokenizers` reads it (the pre-tokenizer's and the Metaspace decoder's).
PrependScheme read_prepend_scheme(const json& meta, const std::string& where, const std::string& src);
// Metaspace's replacement character (one character).
std::string read_replacement(const json& meta, const std::string& where, const std::string& src);
// The decoder, after the pre-tokenizer (it must match spec.kind).
void read_decoder(const json& d, const std::string& where, TokenizerSpec& spec);
// The ids a post-processor puts around one sequence, into spec.template_prefix and template_suffix.
void read_post_processor(const json& p, const std::string& where, TokenizerSpec& spec);

}  // namespace cleave::tokenizer::json_parts
