// CheckpointReader (checkpoint_reader.hpp).
#include "engine/train/checkpoint_reader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/checkpoint/checksum.hpp"
#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string shape_text(const std::vector<std::int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }

checkpoint::CheckpointIndex read_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  std::ifstream in(path, std::ios::binary);
  CLEAVE_CHECK(in.good(), "checkpoint {}: no index.json (not a complete checkpoint directory)", dir);
  std::stringstream text;
  text << in.rdbuf();
  return checkpoint::parse_checkpoint_index(text.str(), path);
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)), index_(read_index(dir_)) {}

std::vector<std::string> CheckpointReader::parameter_names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : index_.tensors) {
    if (tensor.kind == "parameter") out.push_back(name);
  }
  return out;  // std::map iterates in key order
}

std::vector<std::int64_t> CheckpointReader::shape_of(const std::string& name) const {
  auto it = index_.tensors.find(name);
  CLEAVE_CHECK(it != index_.tensors.end(), "checkpoint {}: tensor {} is missing from index.json", dir_, name);
  return it->second.shape;
}

std::vector<float> CheckpointReader::logical(const std::string& name, const std::vector<std::int64_t>* expected_shape) {
  try {
    auto found = index_.tensors.find(name);
    CLEAVE_CHECK(found != index_.tensors.end(),
                 "checkpoint {}: tensor {} is missing from index.json (this run needs it)", dir_, name);
    const checkpoint::IndexTensor& entry = found->second;
    const std::vector<std::int64_t>& shape = entry.shape;
    CLEAVE_CHECK(expected_shape == nullptr || *expected_shape == shape,
                 "checkpoint {}: tensor {} has logical shape {} in the checkpoint, but this model's is {} (a "
                 "different model?)",
                 dir_, name, shape_text(shape), shape_text(expected_shape ? *expected_shape : shape));
    const Shape logical_shape{std::span<const std::int64_t>(shape)};
    // Pieces by tp shard: each shard's ranges must cover it exactly.
    struct ShardPlan {
      layers::ShardSpec spec;
      std::int64_t numel = 0;
      std::vector<const checkpoint::IndexPiece*> pieces;  // sorted by begin
    };
    std::map<int, ShardPlan> by_index;
    const int parts = entry.pieces.front().parts;
    for (const checkpoint::IndexPiece& piece : entry.pieces) {
      CLEAVE_CHECK(piece.parts == parts, "checkpoint {}: tensor {} mixes pieces of {} and {} tp shards", dir_, name,
                   parts, piece.parts);
      by_index[piece.index].pieces.push_back(&piece);
    }
    CLEAVE_CHECK(static_cast<int>(by_index.size()) == parts,
                 "checkpoint {}: tensor {} has pieces of {} tp shards, but was split into {}", dir_, name,
                 by_index.size(), parts);
    // 1. Coverage, from index.json alone: every shard's pieces tile [0, shard numel) in order.
    for (auto& [index, plan] : by_index) {
      const checkpoint::IndexPiece& first = *plan.pieces.front();
      plan.spec = first.dim < 0 ? layers::replicated_spec(logical_shape)
                                : layers::make_shard_spec(logical_shape, first.dim, parts, index, first.groups);
      plan.numel = layers::shard_shape(plan.spec).numel();
      std::stable_sort(plan.pieces.begin(), plan.pieces.end(),
                       [](const auto* a, const auto* b) { return a->begin < b->begin; });
      std::int64_t covered = 0;
      for (const checkpoint::IndexPiece* piece : plan.pieces) {
        CLEAVE_CHECK(piece->dim == first.dim && piece->groups == first.groups,
                     "checkpoint {}: tensor {} shard {}: pieces split along dim {} in {} groups and dim {} in {} groups",
                     dir_, name, index, first.dim, first.groups, piece->dim, piece->groups);
        CLEAVE_CHECK(piece->begin == covered && piece->end <= plan.numel,
                     "checkpoint {}: tensor {} shard {}: piece {} in {} covers [{}, {}), expected to start at {} "
                     "within {} elements",
                     dir_, name, index, piece->name, piece->file, piece->begin, piece->end, covered, plan.numel);
        covered = piece->end;
      }
      CLEAVE_CHECK(covered == plan.numel, "checkpoint {}: tensor {} shard {}: pieces cover {} of {} elements", dir_,
                   name, index, covered, plan.numel);
    }
    // 2. The bytes: files present with the recorded size and checksum, each piece the size index.json says.
    for (const auto& [index, plan] : by_index) {
      for (const checkpoint::IndexPiece* piece : plan.pieces) {
        const auto bytes = open(piece->file, name).bytes(piece->name);
        CLEAVE_CHECK(static_cast<std::int64_t>(bytes.size()) == (piece->end - piece->begin) * 4,
                     "checkpoint file {}: tensor {} ({}) holds {} bytes, index.json says {} f32 elements",
                     path_of(piece->file), piece->name, name, bytes.size(), piece->end - piece->begin);
      }
    }
    // 3. Only now allocate: every element below is backed by bytes read from disk.
    std::vector<float> out;
    for (const auto& [index, plan] : by_index) {
      std::vector<float> shard(static_cast<std::size_t>(plan.numel));
      for (const checkpoint::IndexPiece* piece : plan.pieces) {
        const auto bytes = files_.at(piece->file).bytes(piece->name);
        std::memcpy(shard.data() + piece->begin, bytes.data(), bytes.size());
      }
      if (plan.spec.dim < 0) out = std::move(shard);
      else layers::place_shard(out, shard, plan.spec);
    }
    return out;
  } catch (const Error& e) {
    rethrow_one_line(e);  // names and keys quoted from the input may hold control characters
  }
}

std::string CheckpointReader::path_of(const std::string& file) const { return (fs::path(dir_) / file).string(); }

// The file, checked once: present, its size and checksum as index.json records, a valid safetensors file.
const checkpoint::SafetensorsFile& CheckpointReader::open(const std::string& file, const std::string& tensor) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  const std::string path = path_of(file);
  auto listed = index_.files.find(file);
  CLEAVE_CHECK(listed != index_.files.end(), "checkpoint {}: tensor {} lives in {}, which index.json does not list",
               dir_, tensor, file);
  std::error_code ec;
  CLEAVE_CHECK(fs::is_regular_file(path, ec), "checkpoint file {} is missing (it holds tensor {})", path, tensor);
  const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
  const std::int64_t expected = listed->second.bytes;
  CLEAVE_CHECK(size == expected,
               "checkpoint file {} has {} bytes, index.json records {} (truncated or replaced; it holds tensor {})",
               path, size, expected, tensor);
  const std::string checksum = checkpoint::checksum_text(checkpoint::file_checksum(path));
  const std::string& recorded = listed->second.checksum;
  CLEAVE_CHECK(checksum == recorded,
               "checkpoint file {}: checksum {} does not match {} recorded in index.json (corrupt; it holds "
               "tensor {})",
               path, checksum, recorded, tensor);
  bytes_read_ += size;
  return files_.emplace(file, checkpoint::read_safetensors(path)).first->second;
}

}  // namespace cleave::train
