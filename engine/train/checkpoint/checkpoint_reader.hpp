// CheckpointReader: one checkpoint directory opened for reading (index.json checked, files opened on demand)
// and any tp shard, or element range of one, of a logical tensor read from the byte ranges of the stored pieces
// that overlap it. Used by Trainer::load_checkpoint (resharding on load: each rank reads only its own shard, its
// ZeRO-1 range, its stage's tensors) and `cleave export` (whole logical tensors).
//
// Invariants: a range is read only when the tensor's pieces cover every element of every tp shard of the saved
// layout exactly once (index.json alone) and the piece's file has the recorded size, a header the strict
// safetensors reader accepts and the piece's recorded byte size. Every byte handed out was verified: pieces
// with chunk checksums (checkpoint_index.hpp) verify each chunk a read touches; pieces of older checkpoints
// (without them) verify the whole file's checksum once, streaming, before the first read. Every failure is an
// Error naming the checkpoint or file, the tensor and the numbers; one about the bytes on disk (a missing,
// resized or corrupt file, an index.json that fails its checks) is a CheckpointDamage
// (engine/checkpoint/checkpoint_damage.hpp), one about the run (a tensor this model needs is absent, another
// shape) a plain Error. Reads only; holds the files it opened.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/range_file.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "layers/layer.hpp"

namespace cleave::train {

inline constexpr int kCheckpointFormatVersion = checkpoint::kCheckpointFormatVersion;

class CheckpointReader {
 public:
  // Reads and checks `dir`/index.json (checkpoint_index.hpp: format, version, every field the readers use).
  // Throws Error naming the directory or the file.
  explicit CheckpointReader(std::string dir);

  const std::string& dir() const { return dir_; }
  // The whole document; step, model (an object), optimizer.type and optimizer.steps_done are checked.
  const nlohmann::json& index() const { return index_.document; }
  // Names of the stored parameters (tensors of kind "parameter"), sorted.
  std::vector<std::string> parameter_names() const;
  // The logical shape index.json records for `name`; throws when the tensor is absent.
  std::vector<std::int64_t> shape_of(const std::string& name) const;
  // The logical tensor `name` (f32, row-major). `expected_shape`, when given, must equal the recorded shape (a
  // different model otherwise). Nothing is allocated before the pieces are known to cover every shard exactly
  // and their files' sizes match: the tensor is never larger than the bytes on disk.
  std::vector<float> logical(const std::string& name, const std::vector<std::int64_t>* expected_shape = nullptr);
  // Elements [begin, begin + out.size()) of the flattened tp shard `spec` of `name` (layers/parallel/shard.hpp;
  // padding rows read as 0), under whatever layout saved it. Reads only the bytes of the stored pieces that
  // overlap those elements (rounded out to whole checksum chunks) and never builds the logical tensor.
  // spec.logical must equal the recorded shape (a different model otherwise: Error naming both shapes).
  void read_shard_range(const std::string& name, const layers::ShardSpec& spec, std::int64_t begin,
                        std::span<float> out);
  // Every file index.json lists: present, of the recorded size, its header intact where index.json records its
  // checksum (reads headers only, keeps nothing open: checkpoint/quick_check.hpp). Throws CheckpointDamage naming
  // the file.
  void check_files() const;
  // Bytes read from disk so far: headers, the ranges and chunks read, and whole files checksummed.
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  // A contiguous run of elements: `logical` in the logical tensor, `shard` in a flattened tp shard.
  struct Run {
    std::int64_t logical = 0, shard = 0, n = 0;
  };
  struct SavedShard {  // one tp shard of the saved layout
    layers::ShardSpec spec;
    std::int64_t numel = 0;
    std::vector<const checkpoint::IndexPiece*> pieces;  // tile [0, numel) in order
    std::vector<Run> runs;                              // for_each_shard_run(spec)
  };
  struct OpenFile {
    checkpoint::SafetensorsFile header;  // data empty
    checkpoint::RangeFile file;
    bool whole_file_verified = false;
  };
  // An element range of one piece to copy: piece elements [src, src + n) to out[dst, dst + n).
  struct Copy {
    std::int64_t src = 0, dst = 0, n = 0;
  };

  std::string path_of(const std::string& file) const;
  // The saved shards of `name`, coverage checked from index.json alone (cached).
  const std::vector<SavedShard>& plan_of(const std::string& name, const std::vector<std::int64_t>* expected_shape);
  OpenFile& open(const std::string& file, const std::string& tensor);
  // The file's checksum against index.json, reading all of it (older checkpoints only).
  void verify_whole_file(const std::string& file, const std::string& tensor);
  // The file of `piece` opened and the piece's bytes in it the size index.json says; returns its data offset.
  std::int64_t check_piece(const checkpoint::IndexPiece& piece, const std::string& tensor);
  void read_piece(const checkpoint::IndexPiece& piece, const std::string& tensor, const std::vector<Copy>& copies,
                  std::span<float> out);

  std::string dir_;
  checkpoint::CheckpointIndex index_;
  std::map<std::string, std::vector<SavedShard>> plans_;
  std::map<std::string, OpenFile> files_;
  std::int64_t bytes_read_ = 0;
};

}  // namespace cleave::train
