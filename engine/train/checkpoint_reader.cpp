// CheckpointReader (checkpoint_reader.hpp).
#include "engine/train/checkpoint_reader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/checkpoint/checksum.hpp"
#include "engine/core/error.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string shape_text(const std::vector<std::int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }

json read_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  std::ifstream in(path);
  CLEAVE_CHECK(in.good(), "checkpoint {}: no index.json (not a complete checkpoint directory)", dir);
  json index;
  try {
    index = json::parse(in);
  } catch (const std::exception& e) {
    CLEAVE_THROW("checkpoint {}: index.json does not parse ({})", path, e.what());
  }
  CLEAVE_CHECK(index.value("format", "") == "cleave-checkpoint" && index.value("version", 0) == kCheckpointFormatVersion,
               "checkpoint {}: index.json is not a cleave checkpoint of format version {}", path,
               kCheckpointFormatVersion);
  return index;
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)), index_(read_index(dir_)) {}

std::vector<std::string> CheckpointReader::parameter_names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : index_.at("tensors").items()) {
    if (entry.value("kind", "") == "parameter") out.push_back(name);
  }
  return out;  // json objects iterate in key order
}

std::vector<std::int64_t> CheckpointReader::shape_of(const std::string& name) const {
  const json& tensors = index_.at("tensors");
  CLEAVE_CHECK(tensors.contains(name), "checkpoint {}: tensor {} is missing from index.json", dir_, name);
  return tensors.at(name).at("shape").get<std::vector<std::int64_t>>();
}

std::vector<float> CheckpointReader::logical(const std::string& name, const std::vector<std::int64_t>* expected_shape) {
  const json& tensors = index_.at("tensors");
  CLEAVE_CHECK(tensors.contains(name), "checkpoint {}: tensor {} is missing from index.json (this run needs it)",
               dir_, name);
  const json& entry = tensors.at(name);
  const auto shape = entry.at("shape").get<std::vector<std::int64_t>>();
  CLEAVE_CHECK(expected_shape == nullptr || *expected_shape == shape,
               "checkpoint {}: tensor {} has logical shape {} in the checkpoint, but this model's is {} (a "
               "different model?)",
               dir_, name, shape_text(shape), shape_text(expected_shape ? *expected_shape : shape));
  const Shape logical_shape{std::span<const std::int64_t>(shape)};
  // Pieces by tp shard: each shard's ranges must cover it exactly.
  std::map<int, std::vector<const json*>> by_index;
  int parts = -2;
  for (const json& piece : entry.at("pieces")) {
    const int piece_parts = piece.at("parts").get<int>();
    CLEAVE_CHECK(parts == -2 || parts == piece_parts, "checkpoint {}: tensor {} mixes pieces of {} and {} tp shards",
                 dir_, name, parts, piece_parts);
    parts = piece_parts;
    by_index[piece.at("index").get<int>()].push_back(&piece);
  }
  CLEAVE_CHECK(parts >= 1 && static_cast<int>(by_index.size()) == parts,
               "checkpoint {}: tensor {} has pieces of {} tp shards, but was split into {}", dir_, name,
               by_index.size(), parts);
  std::vector<float> out;
  for (auto& [index, pieces] : by_index) {
    const json& first = *pieces.front();
    const int dim = first.at("dim").get<int>();
    const layers::ShardSpec spec =
        dim < 0 ? layers::replicated_spec(logical_shape)
                : layers::make_shard_spec(logical_shape, dim, parts, index, first.at("groups").get<int>());
    const std::int64_t shard_numel = layers::shard_shape(spec).numel();
    std::vector<float> shard(static_cast<std::size_t>(shard_numel));
    std::sort(pieces.begin(), pieces.end(),
              [](const json* a, const json* b) { return a->at("begin").get<std::int64_t>() < b->at("begin").get<std::int64_t>(); });
    std::int64_t covered = 0;
    for (const json* piece : pieces) {
      const auto begin = piece->at("begin").get<std::int64_t>();
      const auto end = piece->at("end").get<std::int64_t>();
      const std::string file = piece->at("file").get<std::string>();
      const std::string in_file = piece->at("name").get<std::string>();
      CLEAVE_CHECK(begin == covered && end >= begin && end <= shard_numel,
                   "checkpoint {}: tensor {} shard {}: piece {} in {} covers [{}, {}), expected to start at {} "
                   "within {} elements",
                   dir_, name, index, in_file, file, begin, end, covered, shard_numel);
      const auto bytes = open(file, name).bytes(in_file);
      CLEAVE_CHECK(static_cast<std::int64_t>(bytes.size()) == (end - begin) * 4,
                   "checkpoint file {}: tensor {} ({}) holds {} bytes, index.json says {} f32 elements",
                   path_of(file), in_file, name, bytes.size(), end - begin);
      std::memcpy(shard.data() + begin, bytes.data(), bytes.size());
      covered = end;
    }
    CLEAVE_CHECK(covered == shard_numel, "checkpoint {}: tensor {} shard {}: pieces cover {} of {} elements", dir_,
                 name, index, covered, shard_numel);
    if (dim < 0) out = std::move(shard);
    else layers::place_shard(out, shard, spec);
  }
  return out;
}

std::string CheckpointReader::path_of(const std::string& file) const { return (fs::path(dir_) / file).string(); }

// The file, checked once: present, its size and checksum as index.json records, a valid safetensors file.
const checkpoint::SafetensorsFile& CheckpointReader::open(const std::string& file, const std::string& tensor) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  const std::string path = path_of(file);
  const json& files = index_.at("files");
  CLEAVE_CHECK(files.contains(file), "checkpoint {}: tensor {} lives in {}, which index.json does not list", dir_,
               tensor, file);
  std::error_code ec;
  CLEAVE_CHECK(fs::exists(path, ec), "checkpoint file {} is missing (it holds tensor {})", path, tensor);
  const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
  const auto expected = files.at(file).at("bytes").get<std::int64_t>();
  CLEAVE_CHECK(size == expected,
               "checkpoint file {} has {} bytes, index.json records {} (truncated or replaced; it holds tensor {})",
               path, size, expected, tensor);
  const std::string checksum = checkpoint::checksum_text(checkpoint::file_checksum(path));
  const std::string recorded = files.at(file).at("checksum").get<std::string>();
  CLEAVE_CHECK(checksum == recorded,
               "checkpoint file {}: checksum {} does not match {} recorded in index.json (corrupt; it holds "
               "tensor {})",
               path, checksum, recorded, tensor);
  bytes_read_ += size;
  return files_.emplace(file, checkpoint::read_safetensors(path)).first->second;
}

}  // namespace cleave::train
