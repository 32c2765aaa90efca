// CheckpointReader (checkpoint_reader.hpp).
#include "engine/train/checkpoint/checkpoint_reader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/quick_check.hpp"
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
  CLEAVE_CHECK_INTACT(in.good(), "checkpoint {}: no index.json (not a complete checkpoint directory)", dir);
  std::stringstream text;
  text << in.rdbuf();
  return checkpoint::parse_checkpoint_index(text.str(), path);
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)), index_(read_index(dir_)) {}

std::vector<std::string> CheckpointReader::parameter_names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : index_.tensors) {
    if (tensor.kind == checkpoint::IndexTensorKind::kParameter) out.push_back(name);
  }
  return out;  // std::map iterates in key order
}

std::vector<std::int64_t> CheckpointReader::shape_of(const std::string& name) const {
  auto it = index_.tensors.find(name);
  CLEAVE_CHECK(it != index_.tensors.end(), "checkpoint {}: tensor {} is missing from index.json", dir_, name);
  return it->second.shape;
}

const std::vector<CheckpointReader::SavedShard>& CheckpointReader::plan_of(
    const std::string& name, const std::vector<std::int64_t>* expected_shape) {
  auto found = index_.tensors.find(name);
  CLEAVE_CHECK(found != index_.tensors.end(), "checkpoint {}: tensor {} is missing from index.json (this run needs it)",
               dir_, name);
  const checkpoint::IndexTensor& entry = found->second;
  const std::vector<std::int64_t>& shape = entry.shape;
  CLEAVE_CHECK(expected_shape == nullptr || *expected_shape == shape,
               "checkpoint {}: tensor {} has logical shape {} in the checkpoint, but this model's is {} (a "
               "different model?)",
               dir_, name, shape_text(shape), shape_text(expected_shape ? *expected_shape : shape));
  if (auto cached = plans_.find(name); cached != plans_.end()) return cached->second;
  const Shape logical_shape{std::span<const std::int64_t>(shape)};
  // Pieces by tp shard: each shard's ranges must cover it exactly.
  std::map<int, SavedShard> by_index;
  const int parts = entry.pieces.front().parts;
  for (const checkpoint::IndexPiece& piece : entry.pieces) {
    CLEAVE_CHECK_INTACT(piece.parts == parts, "checkpoint {}: tensor {} mixes pieces of {} and {} tp shards", dir_, name,
                        parts, piece.parts);
    by_index[piece.index].pieces.push_back(&piece);
  }
  CLEAVE_CHECK_INTACT(static_cast<int>(by_index.size()) == parts,
                      "checkpoint {}: tensor {} has pieces of {} tp shards, but was split into {}", dir_, name,
                      by_index.size(), parts);
  std::vector<SavedShard> shards;
  for (auto& [index, plan] : by_index) {
    const checkpoint::IndexPiece& first = *plan.pieces.front();
    plan.spec = first.dim < 0 ? layers::replicated_spec(logical_shape)
                              : layers::make_shard_spec(logical_shape, first.dim, parts, index, first.groups);
    plan.numel = layers::shard_shape(plan.spec).numel();
    std::stable_sort(plan.pieces.begin(), plan.pieces.end(),
                     [](const auto* a, const auto* b) { return a->begin < b->begin; });
    std::int64_t covered = 0;
    for (const checkpoint::IndexPiece* piece : plan.pieces) {
      CLEAVE_CHECK_INTACT(piece->dim == first.dim && piece->groups == first.groups,
                          "checkpoint {}: tensor {} shard {}: pieces split along dim {} in {} groups and dim {} in {} groups",
                          dir_, name, index, first.dim, first.groups, piece->dim, piece->groups);
      CLEAVE_CHECK_INTACT(piece->begin == covered && piece->end <= plan.numel,
                          "checkpoint {}: tensor {} shard {}: piece {} in {} covers [{}, {}), expected to start at {} "
                          "within {} elements",
                          dir_, name, index, piece->name, piece->file, piece->begin, piece->end, covered, plan.numel);
      covered = piece->end;
    }
    CLEAVE_CHECK_INTACT(covered == plan.numel, "checkpoint {}: tensor {} shard {}: pieces cover {} of {} elements", dir_,
                        name, index, covered, plan.numel);
    shards.push_back(std::move(plan));
  }
  // The files: present, of the recorded size, each piece's bytes the size index.json says.
  for (const SavedShard& shard : shards) {
    for (const checkpoint::IndexPiece* piece : shard.pieces) check_piece(*piece, name);
  }
  // Only now is the run list (at most one run per stored element) bounded by the bytes on disk.
  for (SavedShard& shard : shards) {
    layers::for_each_shard_run(shard.spec, [&shard](std::int64_t logical, std::int64_t at, std::int64_t n) {
      shard.runs.push_back({logical, at, n});
    });
  }
  return plans_.emplace(name, std::move(shards)).first->second;
}

std::vector<float> CheckpointReader::logical(const std::string& name, const std::vector<std::int64_t>* expected_shape) {
  try {
    plan_of(name, expected_shape);  // coverage and file sizes checked
    // Only now allocate: every element below is backed by bytes on disk.
    const std::vector<std::int64_t> shape = shape_of(name);
    const Shape logical_shape{std::span<const std::int64_t>(shape)};
    std::vector<float> out(static_cast<std::size_t>(logical_shape.numel()));
    read_shard_range(name, layers::replicated_spec(logical_shape), 0, out);
    return out;
  } catch (const Error& e) {
    checkpoint::rethrow_one_line_keeping_damage(e);  // names and keys quoted from the input may hold control characters
  }
}

void CheckpointReader::read_shard_range(const std::string& name, const layers::ShardSpec& spec, std::int64_t begin,
                                        std::span<float> out) {
  try {
    const std::vector<std::int64_t> dims(spec.logical.dims().begin(), spec.logical.dims().end());
    const std::vector<SavedShard>& shards = plan_of(name, &dims);
    const auto end = begin + static_cast<std::int64_t>(out.size());
    CLEAVE_ASSERT(begin >= 0 && end <= layers::shard_shape(spec).numel(), "read_shard_range of {}: [{}, {}) outside {}",
                  name, begin, end, layers::shard_shape(spec).str());
    std::fill(out.begin(), out.end(), 0.0f);  // padding rows
    // The wanted logical runs, clipped to [begin, end) of the target shard; `shard` becomes the offset into out.
    std::vector<Run> want;
    layers::for_each_shard_run(spec, [&](std::int64_t logical, std::int64_t shard, std::int64_t n) {
      const std::int64_t lo = std::max(shard, begin), hi = std::min(shard + n, end);
      if (lo < hi) want.push_back({logical + lo - shard, lo - begin, hi - lo});
    });
    // Both run lists increase in logical and shard order (shard.hpp), so one merge intersects them and the
    // source offsets it yields increase: the piece they fall in only moves forward.
    for (const SavedShard& saved : shards) {
      std::vector<std::vector<Copy>> copies(saved.pieces.size());
      std::size_t piece = 0;
      const auto add = [&](std::int64_t src, std::int64_t dst, std::int64_t n) {
        while (n > 0) {
          while (saved.pieces[piece]->end <= src) ++piece;
          const checkpoint::IndexPiece& p = *saved.pieces[piece];
          const std::int64_t take = std::min(n, p.end - src);
          std::vector<Copy>& list = copies[piece];
          if (!list.empty() && list.back().src + list.back().n == src - p.begin &&
              list.back().dst + list.back().n == dst) {
            list.back().n += take;
          } else {
            list.push_back({src - p.begin, dst, take});
          }
          src += take;
          dst += take;
          n -= take;
        }
      };
      std::size_t a = 0, b = 0;
      while (a < want.size() && b < saved.runs.size()) {
        const Run& w = want[a];
        const Run& s = saved.runs[b];
        const std::int64_t lo = std::max(w.logical, s.logical);
        const std::int64_t hi = std::min(w.logical + w.n, s.logical + s.n);
        if (lo < hi) add(s.shard + lo - s.logical, w.shard + lo - w.logical, hi - lo);
        if (w.logical + w.n <= s.logical + s.n) ++a;
        else ++b;
      }
      for (std::size_t k = 0; k < saved.pieces.size(); ++k) {
        if (!copies[k].empty()) read_piece(*saved.pieces[k], name, copies[k], out);
      }
    }
  } catch (const Error& e) {
    checkpoint::rethrow_one_line_keeping_damage(e);
  }
}

std::string CheckpointReader::path_of(const std::string& file) const { return (fs::path(dir_) / file).string(); }

// The file, checked once: listed, present, its size as index.json records, a header the strict reader accepts.
CheckpointReader::OpenFile& CheckpointReader::open(const std::string& file, const std::string& tensor) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  const std::string path = path_of(file);
  auto listed = index_.files.find(file);
  CLEAVE_CHECK_INTACT(listed != index_.files.end(), "checkpoint {}: tensor {} lives in {}, which index.json does not list",
                      dir_, tensor, file);
  std::error_code ec;
  const std::string holds = tensor.empty() ? std::string() : fmt::format(" (it holds tensor {})", tensor);
  CLEAVE_CHECK_INTACT(fs::is_regular_file(path, ec), "checkpoint file {} is missing{}", path, holds);
  const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
  const std::int64_t expected = listed->second.bytes;
  CLEAVE_CHECK_INTACT(size == expected,
                      "checkpoint file {} has {} bytes, index.json records {} (truncated or replaced){}", path, size,
                      expected, holds);
  // An older checkpoint (no header checksum): the whole file's checksum first, as before range reads existed.
  const bool whole = !listed->second.header_checksum.has_value();
  if (whole) verify_whole_file(file, tensor);
  checkpoint::SafetensorsFile header;
  try {
    header = checkpoint::read_safetensors_header(path, listed->second.header_checksum);
  } catch (const Error& e) {
    throw checkpoint::CheckpointDamage(fmt::format("{}{}", e.what(), holds));
  }
  bytes_read_ += header.data_offset;
  return files_.emplace(file, OpenFile{std::move(header), checkpoint::RangeFile(path), whole}).first->second;
}

void CheckpointReader::verify_whole_file(const std::string& file, const std::string& tensor) {
  const std::string path = path_of(file);
  const std::string checksum = checkpoint::checksum_text(checkpoint::file_checksum(path));
  const std::string& recorded = index_.files.at(file).checksum;
  CLEAVE_CHECK_INTACT(checksum == recorded,
                      "checkpoint file {}: checksum {} does not match {} recorded in index.json (corrupt; it holds "
                      "tensor {})",
                      path, checksum, recorded, tensor);
  bytes_read_ += index_.files.at(file).bytes;
}

void CheckpointReader::check_files() const {
  try {
    checkpoint::check_checkpoint_files(dir_, index_);
  } catch (const Error& e) {
    checkpoint::rethrow_one_line_keeping_damage(e);
  }
}

std::int64_t CheckpointReader::check_piece(const checkpoint::IndexPiece& piece, const std::string& tensor) {
  OpenFile& f = open(piece.file, tensor);
  const auto found = f.header.tensors.find(piece.name);
  CLEAVE_CHECK_INTACT(found != f.header.tensors.end(), "checkpoint file {} holds no tensor {} ({}), which index.json "
                      "places there", path_of(piece.file), piece.name, tensor);
  const checkpoint::TensorRecord& record = found->second;
  CLEAVE_CHECK_INTACT(record.dtype == "F32" && record.end - record.begin == (piece.end - piece.begin) * 4,
                      "checkpoint file {}: tensor {} ({}) holds {} bytes, index.json says {} f32 elements",
                      path_of(piece.file), piece.name, tensor, record.end - record.begin, piece.end - piece.begin);
  return f.header.data_offset + record.begin;
}

void CheckpointReader::read_piece(const checkpoint::IndexPiece& piece, const std::string& tensor,
                                  const std::vector<Copy>& copies, std::span<float> out) {
  const std::int64_t base = check_piece(piece, tensor);
  OpenFile& f = files_.at(piece.file);
  const std::span<std::byte> bytes = std::as_writable_bytes(out);
  if (piece.chunk_bytes == 0) {  // an older checkpoint: the whole file's checksum, once, then plain range reads
    if (!f.whole_file_verified) {
      verify_whole_file(piece.file, tensor);
      f.whole_file_verified = true;
    }
    for (const Copy& c : copies) {
      f.file.read(base + 4 * c.src,
                  bytes.subspan(static_cast<std::size_t>(4 * c.dst), static_cast<std::size_t>(4 * c.n)));
      bytes_read_ += 4 * c.n;
    }
    return;
  }
  const std::int64_t piece_bytes = 4 * (piece.end - piece.begin);
  const std::int64_t chunk_bytes = piece.chunk_bytes;
  std::vector<std::byte> chunk;
  std::int64_t cached = -1;  // the chunk in `chunk`, verified
  for (const Copy& c : copies) {
    for (std::int64_t from = 4 * c.src, to = 4 * (c.src + c.n); from < to;) {
      const std::int64_t k = from / chunk_bytes;
      const std::int64_t chunk_begin = k * chunk_bytes;
      const std::int64_t chunk_end = std::min(piece_bytes, chunk_begin + chunk_bytes);
      if (k != cached) {
        chunk.resize(static_cast<std::size_t>(chunk_end - chunk_begin));
        f.file.read(base + chunk_begin, chunk);
        bytes_read_ += chunk_end - chunk_begin;
        const std::uint64_t hash = checkpoint::fnv1a64(chunk);
        CLEAVE_CHECK_INTACT(hash == piece.chunks[static_cast<std::size_t>(k)],
                            "checkpoint file {}: bytes [{}, {}) of tensor {} ({}) fail their checksum ({:016x}, index.json "
                            "records {:016x}): the file is corrupt; restore it or resume from an earlier checkpoint",
                            path_of(piece.file), chunk_begin, chunk_end, piece.name, tensor, hash,
                            piece.chunks[static_cast<std::size_t>(k)]);
        cached = k;
      }
      const std::int64_t n = std::min(to, chunk_end) - from;
      std::memcpy(bytes.data() + 4 * c.dst + (from - 4 * c.src), chunk.data() + (from - chunk_begin),
                  static_cast<std::size_t>(n));
      from += n;
    }
  }
}

}  // namespace cleave::train
