// CheckpointReader: one checkpoint directory opened for reading (index.json checked, files opened on demand)
// and logical tensors assembled from their pieces. Used by Trainer::load_checkpoint (resharding on load) and
// `cleave export`.
//
// Invariants: a file is used only after its size and FNV-1a 64 checksum match index.json and the strict
// safetensors reader accepted it; a logical tensor is returned only when its pieces cover every element of
// every tp shard of the saved layout exactly once. Every failure is an Error naming the checkpoint or file,
// the tensor and the numbers. Reads only; holds the files it opened.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/safetensors.hpp"

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
  // The logical tensor `name` (f32, row-major), assembled from its pieces. `expected_shape`, when given, must
  // equal the recorded shape (a different model otherwise). Nothing is allocated before the pieces are known
  // to cover every shard exactly and their files' sizes and checksums match: the tensor is never larger than
  // the bytes on disk.
  std::vector<float> logical(const std::string& name, const std::vector<std::int64_t>* expected_shape = nullptr);
  // Bytes of the files opened so far (each read once, checksummed once).
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  std::string path_of(const std::string& file) const;
  const checkpoint::SafetensorsFile& open(const std::string& file, const std::string& tensor);

  std::string dir_;
  checkpoint::CheckpointIndex index_;
  std::map<std::string, checkpoint::SafetensorsFile> files_;
  std::int64_t bytes_read_ = 0;
};

}  // namespace cleave::train
