// The tokens a model's tokenizer puts around each document (a BOS before, an EOS after), as Hugging Face
// `transformers` decides them for encode(text) with add_special_tokens=True:
//   1. tokenizer_config.json beside tokenizer.json, when it has "add_bos_token" or "add_eos_token" (Llama 2,
//      Mistral, Gemma: LlamaTokenizerFast rebuilds its template from them): bos_token before when add_bos_token
//      is true (default true when only add_eos_token is given), eos_token after when add_eos_token is true;
//   2. otherwise tokenizer.json's post_processor (TemplateProcessing "single", e.g. Llama 3's
//      "<|begin_of_text|> $A"; Roberta/Bert's cls and sep);
//   3. otherwise nothing.
//
// Invariant: every id returned is a token of the tokenizer. Errors name the file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace cleave::tokenizer {

struct DocumentTemplate {
  std::vector<std::int32_t> before;  // ids written before each document
  std::vector<std::int32_t> after;   // ids written after it
  std::string source;  // what decided: "tokenizer_config.json (add_bos_token true, add_eos_token false)", ...
};

// `config_json`: the text of tokenizer_config.json ("" when there is none); `config_path` names it.
DocumentTemplate document_template(const Tokenizer& tok, const std::string& config_json, const std::string& config_path);

// Reads DIR/tokenizer_config.json beside `tokenizer_path` when it exists.
DocumentTemplate read_document_template(const Tokenizer& tok, const std::string& tokenizer_path);

}  // namespace cleave::tokenizer
