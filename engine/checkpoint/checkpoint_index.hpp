// index.json of a checkpoint directory, read strictly: every field the loaders use is present, of its type
// and in range before anyone reads it, so a damaged or hand-edited index is one Error naming the file, the
// JSON path and the value (never a JSON-library exception, never an allocation sized by a number nobody
// checked). Pure: text in, a value out; fuzzed by tests/fuzz/checkpoint_index_fuzz.cpp.
//
// Format (written by engine/train/checkpoint/checkpoint_save.cpp):
//   {"format": "cleave-checkpoint", "version": 2, "index_checksum", "step", "consumed_samples", "next_lr", "seed",
//    "model": <the config's model section>, "config": <the resolved config; optional, compared on resume>,
//    "layout": {...}, "optimizer": {"type", "steps_done"},
//    "files": {file: {"bytes", "checksum", "header_checksum"}},
//    "tensors": {name: {"kind", "shape", "dtype": "F32",
//                       "pieces": [{"file", "name", "dim", "parts", "index", "groups", "begin", "end",
//                                   "chunk_bytes", "chunks": ["<16 hex digits>", ...]}]}}}
// A piece holds elements [begin, end) of tp shard `index` of `parts` along `dim` (dim -1: the whole tensor).
// header_checksum, chunk_bytes and chunks are optional (older checkpoints lack them): checksums of a file's
// header and of chunks of a piece's bytes, so a rank that reads part of a file verifies just what it reads.
//
// index_checksum (version 2) is "fnv1a64:<16 hex digits>" of the document without that key, serialised compactly
// with sorted keys (index_checksum() below), so every value the readers use (step, consumed samples, the rng and
// optimizer state, the learning rate, the config, every file's and chunk's checksum) is covered: a flipped bit
// that changes any value is an error before anything else is read. A single flipped bit cannot turn version 2
// into 1 ('2' and '1' differ in two bits), so a damaged version-2 index never passes as an older one.
// Version 1 (written before the index checksum) is read without it.
//
// Checked here: the types above; step, steps_done, bytes >= 0; shape extents >= 0, rank <= Shape::kMaxDims,
// numel < 2^50; dtype F32; -1 <= dim < rank; 1 <= parts <= 2^16; 0 <= index < parts; groups >= 1 dividing
// the split extent; 0 <= begin <= end with 4 × (end - begin) <= the piece file's recorded bytes; with chunks,
// 1 <= chunk_bytes and exactly ceil(4 × (end - begin) / chunk_bytes) checksums of 16 hex digits; every piece
// file listed under "files", whose names are plain names inside the checkpoint directory (no '/', no ".."). Not checked here (it needs the files): sizes and checksums on disk and that the
// pieces cover each shard exactly (engine/train/checkpoint/checkpoint_reader.hpp does both before allocating).
// Extending: add the field to the struct and read it in parse_checkpoint_index with the same helpers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::checkpoint {

inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr const char* kIndexChecksumKey = "index_checksum";
inline constexpr std::int64_t kMaxIndexNumel = std::int64_t{1} << 50;  // elements of one logical tensor
inline constexpr int kMaxIndexParts = 1 << 16;                          // tp shards of one tensor

struct IndexFile {
  std::int64_t bytes = 0;
  std::string checksum;  // "fnv1a64:<16 hex digits>" (checksum.hpp)
  // Optional (absent in older checkpoints: empty): the same of the file's first data-offset bytes (its 8-byte
  // length and JSON header), so a reader of some pieces verifies the header without reading the whole file.
  std::optional<std::uint64_t> header_checksum;  // index.json: "fnv1a64:<16 hex digits>"
};

struct IndexPiece {
  std::string file;  // a key of CheckpointIndex::files
  std::string name;  // the tensor's name inside that safetensors file
  int dim = -1;
  int parts = 1;
  int index = 0;
  int groups = 1;
  std::int64_t begin = 0;  // elements of the shard (flattened)
  std::int64_t end = 0;
  // Optional (absent in checkpoints written before them: chunk_bytes 0): fnv1a64 of each chunk_bytes-long chunk
  // of the piece's bytes, the last one shorter, so a rank reading part of the piece verifies what it reads.
  std::int64_t chunk_bytes = 0;
  std::vector<std::uint64_t> chunks;
};

// A tensor's role, index.json's "kind": "parameter" (a model weight), "optimizer_state" (a moment or a momentum
// buffer); any other kind is read as kOther (kept in the index, never loaded as a parameter).
enum class IndexTensorKind { kParameter, kOptimizerState, kOther };
IndexTensorKind index_tensor_kind(std::string_view text);

struct IndexTensor {
  IndexTensorKind kind = IndexTensorKind::kOther;
  std::vector<std::int64_t> shape;
  std::vector<IndexPiece> pieces;  // in file order
};

struct CheckpointIndex {
  nlohmann::json document;  // the whole index as read (model, layout, ... for callers that compare them)
  std::int64_t step = 0;
  std::string optimizer_type;
  std::int64_t steps_done = 0;
  std::map<std::string, IndexFile> files;
  std::map<std::string, IndexTensor> tensors;  // sorted by name
};

// Parses and checks index.json text (see above). `path` names it in every message. Throws CheckpointDamage
// (checkpoint_damage.hpp) for text that does not parse, fails its checksum or breaks a rule above.
CheckpointIndex parse_checkpoint_index(std::string_view text, const std::string& path);

// fnv1a64 of `document` without its index_checksum key, dumped compactly (nlohmann::json sorts keys and prints
// numbers so they read back to the same text: the writer's and the reader's documents hash alike).
std::uint64_t index_checksum(const nlohmann::json& document);
// Sets document["index_checksum"]; the writer calls it last, after every other key is in place.
void seal_index(nlohmann::json& document);

}  // namespace cleave::checkpoint
