// Reading a Hugging Face tokenizer.json into a Tokenizer.
//
// Accepted (anything else is refused with one Error naming the file, the JSON key, what it holds and what
// is supported, before a table is built; docs/tokenizer.md):
//   model           {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or [["a", "b"], ...],
//                    "ignore_merges"?, "byte_fallback"?, "fuse_unk"?, "unk_token"?}, no dropout, no subword prefix
//                    or suffix (tokenizer_json.cpp)
//   normalizer      null, or Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip and Sequence of them
//                   (tokenizer_json_normalizer.cpp)
//   pre_tokenizer   ByteLevel (use_regex true: the GPT-2 pattern), or Sequence [Split {Regex: the GPT-2 or the
//                   Llama 3 pattern, behavior Isolated, invert false}, ByteLevel (use_regex false)], add_prefix_space
//                   either way; or Metaspace, or null (SentencePiece-style) (tokenizer_json_pre_tokenizer.cpp)
//   decoder         ByteLevel; for SentencePiece-style: Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence
//                   of them (tokenizer_json_decoder.cpp)
//   added_tokens    [{id, content, special, normalized}] with single_word, lstrip and rstrip false
//   post_processor  TemplateProcessing, Roberta/BertProcessing, ByteLevel, Sequence of them or null: the ids put
//                   around one sequence (tokenizer_json_post_processor.cpp; used by cleave tokenize's --bos-eos)
#pragma once

#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.hpp"

namespace cleave::tokenizer {

// `json_text` is the file's contents; `source` names it in messages ("tokenizer path/tokenizer.json").
TokenizerSpec parse_tokenizer_json(std::string_view json_text, const std::string& source);

// Reads and checks the file at `path`. Throws Error: no such file, not JSON, an unsupported or malformed key.
Tokenizer read_tokenizer_json(const std::string& path);

}  // namespace cleave::tokenizer
