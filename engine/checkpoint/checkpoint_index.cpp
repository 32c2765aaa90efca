// Strict index.json reader (checkpoint_index.hpp).
#include "engine/checkpoint/checkpoint_index.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <limits>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/checkpoint/checksum.hpp"
#include "engine/core/error.hpp"
#include "engine/core/shape.hpp"

namespace cleave::checkpoint {
namespace {

using nlohmann::json;

// A short rendering of a value for "got ..." in messages.
std::string show(const json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// Typed access to one JSON object; every failure names the file and the JSON path.
class Fields {
 public:
  Fields(const json& object, std::string path, const std::string& file)
      : object_(object), path_(std::move(path)), file_(file) {
    if (!object_.is_object()) fail(path_, "expected an object, got {}", show(object_));
  }

  const json& get(std::string_view key) const {
    auto it = object_.find(key);
    if (it == object_.end()) fail(where(key), "missing");
    return *it;
  }
  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max) const {
    const json& v = get(key);
    std::int64_t value = 0;
    if (v.is_number_integer() && !v.is_number_unsigned()) value = v.get<std::int64_t>();
    else if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)) {
      value = static_cast<std::int64_t>(v.get<std::uint64_t>());
    } else if (v.is_number_unsigned()) {
      fail(where(key), "{} is outside [{}, {}]", v.get<std::uint64_t>(), min, max);
    } else {
      fail(where(key), "expected an integer, got {}", show(v));
    }
    if (value < min || value > max) fail(where(key), "{} is outside [{}, {}]", value, min, max);
    return value;
  }
  std::string string(std::string_view key) const {
    const json& v = get(key);
    if (!v.is_string()) fail(where(key), "expected a string, got {}", show(v));
    return v.get<std::string>();
  }
  Fields object(std::string_view key) const { return Fields(get(key), where(key), file_); }
  const json& array(std::string_view key) const {
    const json& v = get(key);
    if (!v.is_array()) fail(where(key), "expected an array, got {}", show(v));
    return v;
  }
  const json& raw() const { return object_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  std::string where(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }

  template <typename... Args>
  [[noreturn]] void fail(const std::string& at, fmt::format_string<Args...> format, Args&&... args) const {
    throw CheckpointDamage(fmt::format("checkpoint index {}: {}: {}", file_, at.empty() ? "the top level" : at,
                            fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  const json& object_;
  std::string path_;
  const std::string& file_;
};

constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

// Exactly 16 hex digits as a number (a checksum's text), else nothing.
std::optional<std::uint64_t> hex64(const std::string& text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.size() != 16 || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

IndexPiece read_piece(const Fields& p, const IndexTensor& tensor, const std::map<std::string, IndexFile>& files) {
  IndexPiece piece;
  piece.file = p.string("file");
  piece.name = p.string("name");
  const int rank = static_cast<int>(tensor.shape.size());
  piece.dim = static_cast<int>(p.integer("dim", -1, rank - 1));
  piece.parts = static_cast<int>(p.integer("parts", 1, kMaxIndexParts));
  piece.index = static_cast<int>(p.integer("index", 0, piece.parts - 1));
  piece.groups = static_cast<int>(p.integer("groups", 1, kMaxIndexParts));
  if (piece.dim >= 0 && tensor.shape[static_cast<std::size_t>(piece.dim)] % piece.groups != 0) {
    p.fail(p.where("groups"), "{} does not divide extent {} of dim {} of shape [{}]", piece.groups,
           tensor.shape[static_cast<std::size_t>(piece.dim)], piece.dim, fmt::join(tensor.shape, ","));
  }
  piece.begin = p.integer("begin", 0, kMaxIndexNumel);
  piece.end = p.integer("end", piece.begin, kMaxIndexNumel);
  auto file = files.find(piece.file);
  if (file == files.end()) {
    p.fail(p.where("file"), "'{}' is not listed under \"files\" ({} files listed)", piece.file, files.size());
  }
  if (piece.end - piece.begin > file->second.bytes / 4) {
    p.fail(p.path(), "[{}, {}) is {} f32 elements, but {} holds only {} bytes", piece.begin, piece.end,
           piece.end - piece.begin, piece.file, file->second.bytes);
  }
  if (p.raw().contains("chunk_bytes") || p.raw().contains("chunks")) {
    piece.chunk_bytes = p.integer("chunk_bytes", 1, kMaxInt64);
    const json& chunks = p.array("chunks");
    const std::int64_t bytes = 4 * (piece.end - piece.begin);
    const std::int64_t expected = bytes / piece.chunk_bytes + (bytes % piece.chunk_bytes != 0 ? 1 : 0);
    if (static_cast<std::int64_t>(chunks.size()) != expected) {
      p.fail(p.where("chunks"), "holds {} checksums, but {} bytes in chunks of {} need {}", chunks.size(), bytes,
             piece.chunk_bytes, expected);
    }
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const std::optional<std::uint64_t> value = hex64(chunks[i].is_string() ? chunks[i].get<std::string>() : "");
      if (!value) {
        p.fail(fmt::format("{}[{}]", p.where("chunks"), i), "expected 16 hex digits, got {}", show(chunks[i]));
      }
      piece.chunks.push_back(*value);
    }
  }
  return piece;
}

IndexTensor read_tensor(const Fields& t, const std::map<std::string, IndexFile>& files) {
  IndexTensor tensor;
  tensor.kind = index_tensor_kind(t.string("kind"));
  const std::string dtype = t.string("dtype");
  if (dtype != "F32") t.fail(t.where("dtype"), "'{}' is not supported (checkpoints store F32)", dtype);
  const json& shape = t.array("shape");
  if (shape.size() > static_cast<std::size_t>(Shape::kMaxDims)) {
    t.fail(t.where("shape"), "rank {} exceeds {}", shape.size(), Shape::kMaxDims);
  }
  std::int64_t numel = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const json& extent = shape[d];
    if (!extent.is_number_integer() || (extent.is_number_unsigned() && extent.get<std::uint64_t>() > kMaxIndexNumel) ||
        extent.get<std::int64_t>() < 0 || extent.get<std::int64_t>() > kMaxIndexNumel) {
      t.fail(fmt::format("{}[{}]", t.where("shape"), d), "expected an extent in [0, 2^50], got {}", show(extent));
    }
    tensor.shape.push_back(extent.get<std::int64_t>());
  }
  for (std::int64_t extent : tensor.shape) {
    if (extent == 0) numel = 0;
    else if (numel > kMaxIndexNumel / extent) numel = kMaxIndexNumel + 1;
    else numel *= extent;
  }
  if (numel > kMaxIndexNumel) {
    t.fail(t.where("shape"), "[{}] has more than 2^50 elements", fmt::join(tensor.shape, ","));
  }
  const json& pieces = t.array("pieces");
  if (pieces.empty()) t.fail(t.where("pieces"), "is empty (a tensor needs at least one piece)");
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    tensor.pieces.push_back(read_piece(Fields(pieces[i], fmt::format("{}[{}]", t.where("pieces"), i), t.file()),
                                       tensor, files));
  }
  return tensor;
}

}  // namespace

IndexTensorKind index_tensor_kind(std::string_view text) {
  if (text == "parameter") return IndexTensorKind::kParameter;
  if (text == "optimizer_state") return IndexTensorKind::kOptimizerState;
  return IndexTensorKind::kOther;
}

CheckpointIndex parse_checkpoint_index(std::string_view text, const std::string& path) {
  try {
    CheckpointIndex out;
    try {
      out.document = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      std::string detail = e.what();
      if (const auto close = detail.find("] "); close != std::string::npos) detail = detail.substr(close + 2);
      throw CheckpointDamage(fmt::format("checkpoint index {}: does not parse ({}): damaged or cut short", path, detail));
    }
    const Fields top(out.document, "", path);
    const json& format = top.get("format");
    const json& version = top.get("version");
    if (format != "cleave-checkpoint" || (version != kCheckpointFormatVersion && version != 1)) {
      top.fail("format", "{} version {} is not a cleave checkpoint of format version 1 or {}", show(format),
               show(version), kCheckpointFormatVersion);
    }
    if (version == kCheckpointFormatVersion) {  // version 1 predates the index's own checksum
      const std::string recorded = top.string(kIndexChecksumKey);
      const std::string actual = checksum_text(index_checksum(out.document));
      if (recorded != actual) {
        top.fail(kIndexChecksumKey, "{} does not match the index's content ({}): index.json was changed after it "
                 "was written (a flipped bit, an edit)", show(recorded), actual);
      }
    }
    out.step = top.integer("step", 0, kMaxInt64);
    const Fields optimizer = top.object("optimizer");
    out.optimizer_type = optimizer.string("type");
    out.steps_done = optimizer.integer("steps_done", 0, kMaxInt64);
    top.object("model");
    const Fields files = top.object("files");
    for (const auto& [name, entry] : files.raw().items()) {
      const Fields f(entry, files.where(name), path);
      // Files live in the checkpoint directory itself: a name is never a path that could lead out of it.
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
          name.find('\0') != std::string::npos) {
        files.fail(files.where(name), "'{}' is not a plain file name", name);
      }
      IndexFile& file = out.files[name] = IndexFile{f.integer("bytes", 0, kMaxInt64), f.string("checksum"), {}};
      if (entry.contains("header_checksum")) {
        const std::string text = f.string("header_checksum");
        file.header_checksum = hex64(text.starts_with("fnv1a64:") ? text.substr(8) : std::string());
        if (!file.header_checksum) {
          f.fail(f.where("header_checksum"), "expected fnv1a64:<16 hex digits>, got {}", show(text));
        }
      }
    }
    const Fields tensors = top.object("tensors");
    for (const auto& [name, entry] : tensors.raw().items()) {
      out.tensors.emplace(name, read_tensor(Fields(entry, tensors.where(name), path), out.files));
    }
    return out;
  } catch (const Error& e) {
    rethrow_one_line_keeping_damage(e);  // names and keys quoted from the input may hold control characters
  }
}

std::uint64_t index_checksum(const nlohmann::json& document) {
  nlohmann::json rest = document;
  if (rest.is_object()) rest.erase(std::string(kIndexChecksumKey));
  const std::string text = rest.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
  return fnv1a64(std::as_bytes(std::span(text.data(), text.size())));
}

void seal_index(nlohmann::json& document) {
  document[std::string(kIndexChecksumKey)] = checksum_text(index_checksum(document));
}

}  // namespace cleave::checkpoint
