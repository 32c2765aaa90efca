// manifest.json, written by `cleave tokenize` beside its shards: which shards, how many tokens each, the id
// width, and the tokenizer that wrote them. The data loader reads it (when a shard's directory has one that
// lists the shard) to refuse a model whose vocab_size is smaller than the tokenizer's before any work.
//
//   {"format": "llm.c token shards", "bits": 16 | 32, "tokenizer": "/abs/tokenizer.json",
//    "tokenizer_description": "...", "vocab_size": V, "documents": D, "document_template": "...",
//    "train": [{"path": "train.bin", "tokens": N}, ...], "val": [...]}
//
// Shard paths are relative to the manifest's directory. Invariant: written after every shard it lists is
// complete (write to .tmp, rename), so a manifest never names a missing or partial shard.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cleave::train {

struct TokenManifest {
  struct Shard {
    std::string path;  // relative to the manifest's directory
    std::int64_t tokens = 0;
  };
  int bits = 16;
  std::string tokenizer;
  std::string tokenizer_description;
  std::int64_t vocab_size = 0;
  std::int64_t documents = 0;
  std::string document_template;
  std::vector<Shard> train, val;
};

// Throws Error naming `path` when it exists or cannot be written.
void write_token_manifest(const std::string& path, const TokenManifest& manifest);
// Throws Error naming `path`: unreadable, not JSON, a key missing or of the wrong type.
TokenManifest read_token_manifest(const std::string& path);
// The manifest.json in `shard_path`'s directory when there is one that lists the shard (by file name), with its
// path; nullopt otherwise. Throws when such a manifest exists but is malformed.
std::optional<std::pair<std::string, TokenManifest>> manifest_for_shard(const std::string& shard_path);

}  // namespace cleave::train
