// Reading a Hugging Face model directory: config.json plus model.safetensors, or shards listed by
// model.safetensors.index.json ({"weight_map": {tensor: file}}).
//
// Invariant: read_hf_checkpoint returns only when every tensor of the model (hf_layout.hpp's tensor_map for the
// sizes config.json gives) was found exactly once with its exact shape, nothing else was found but known
// buffers, and every value is converted to f32 in Cleave's order; otherwise it throws ONE Error naming the
// directory, the file and the tensor (an unknown or missing name, a wrong shape, a missing shard, a
// tensor in another file than the index says, an unsupported dtype, an unknown architecture). It only reads.
// Accepted dtypes: F32, BF16, F16 (widened exactly). A GPT-2 saved from GPT2Model (no "transformer." prefix,
// as the original gpt2 upload) is accepted as well. A tied model's lm_head.weight, when a file holds it, must
// equal the embedding table bit for bit.
// Memory: every file is read whole and the model is held as f32 (fine for the models this is used on today;
// a streaming reader would read byte ranges).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/hf/hf_config.hpp"
#include "engine/hf/hf_layout.hpp"

namespace cleave::hf {

struct HfCheckpoint {
  HfModelConfig config;
  nlohmann::json source_config;      // config.json as read (export starts from it)
  nlohmann::json generation_config;  // generation_config.json when the directory has one, else null
  std::map<std::string, std::vector<float>> tensors;  // Cleave name -> values in Cleave's shape and order
  std::map<std::string, std::vector<std::int64_t>> shapes;  // Cleave name -> Cleave shape
  std::vector<std::string> files;                     // the safetensors files read
};

// True when `dir` looks like a Hugging Face model directory: a config.json naming "architectures" or
// "model_type" (a Cleave run directory's config.json names neither) and no index.json.
bool is_hf_dir(const std::string& dir);

HfCheckpoint read_hf_checkpoint(const std::string& dir);
// config.json (checked as read_hf_checkpoint checks it) and generation_config.json only: no tensor is read
// (`tensors`, `shapes` and `files` stay empty), for a caller that needs the model's sizes, not its weights.
HfCheckpoint read_hf_config_files(const std::string& dir);

// The tokenizer files transformers' AutoTokenizer reads, in the order they are looked for; export copies those
// the source directory has.
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                                  "tokenizer.model",  "vocab.json",            "merges.txt",
                                                  "added_tokens.json"};

// index.json "source" of a model imported from `dir` (absolute path, class, config.json and
// generation_config.json as read): what export carries back and where it finds the tokenizer files.
nlohmann::json hf_source_record(const std::string& dir, const HfCheckpoint& checkpoint);

}  // namespace cleave::hf
