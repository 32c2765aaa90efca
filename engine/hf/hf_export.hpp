// Writing a Cleave model as a Hugging Face model directory that transformers' from_pretrained loads:
// config.json (hf_config.hpp) and the weights under HF names and shapes (hf_layout.hpp) in model.safetensors,
// or, when they exceed max_shard_bytes, in model-0000K-of-0000N.safetensors with model.safetensors.index.json
// ({"metadata": {"total_size"}, "weight_map"}), as save_pretrained writes them. Each safetensors file carries
// {"format": "pt"} metadata (transformers refuses files without it).
// A model imported from Hugging Face (`source`, index.json "source": hf_import.hpp's hf_source_record) exports
// as its source class, with config.json starting from the source's (hf_config.hpp: token ids, dropout and
// every other key carried; docs/checkpoints.md lists what differs), the source's generation_config.json (else
// one made from bos/eos), and the tokenizer files (kTokenizerFiles) the source directory still has.
//
// Invariant: the directory appears whole or not at all: everything is written into a sibling temporary
// directory that is renamed at the end (removed on any error); an existing output path is refused before
// anything is read or written. A tied head is not written (transformers ties lm_head to the embedding).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::hf {

struct HfExportOptions {
  bool bf16 = false;                // weights rounded to bf16 (nearest even); else f32
  std::int64_t max_shard_bytes = 0;  // 0: one file; else shards of at most this many tensor bytes (a larger
                                     // tensor gets a shard of its own)
  nlohmann::json source;             // index.json "source" (null: a model Cleave made)
};

struct HfExportStats {
  int files = 0;            // safetensors files
  int tensors = 0;
  std::int64_t bytes = 0;   // all files written, config.json and index included
  std::string architecture;               // the class written
  std::vector<std::string> tokenizer_files;  // copied from the source directory
  std::vector<std::string> notes;         // for the log: keys without Cleave meaning, tokenizer files not found
};

// `model`: a Cleave model section (gpt or llama); `tensor(name)`: Cleave's logical tensor `name` in f32 and
// Cleave's order (e.g. CheckpointReader::logical). Throws Error naming the directory or the tensor.
HfExportStats write_hf_checkpoint(const std::string& dir, const nlohmann::json& model,
                                  const std::function<std::vector<float>(const std::string&)>& tensor,
                                  const HfExportOptions& options);

}  // namespace cleave::hf
