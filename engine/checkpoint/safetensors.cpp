// safetensors writer and strict reader (safetensors.hpp).
#include "engine/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checksum.hpp"
#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::checkpoint {
namespace {

using nlohmann::json;

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
std::string library_detail(const json::exception& e) {
  std::string text = e.what();
  if (const auto close = text.find("] "); text.starts_with("[json.exception") && close != std::string::npos) {
    text = text.substr(close + 2);
  }
  return text;
}

void write_all(int fd, const std::string& path, const std::byte* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    CLEAVE_CHECK(w > 0, "checkpoint file {}: write failed ({})", path, std::strerror(errno));
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

// A JSON array of integers that fit int64. nlohmann's get<std::vector<std::int64_t>>() converts 9.2e20 or
// 1.5 with a plain cast (undefined behaviour past int64; found by tests/fuzz/safetensors_fuzz.cpp).
std::vector<std::int64_t> integers(const json& value, std::string_view key) {
  CLEAVE_CHECK(value.is_array(), "{} is {}, expected an array of integers", key, value.type_name());
  std::vector<std::int64_t> out;
  for (const json& v : value) {
    const bool fits = v.is_number_integer() &&
                      (!v.is_number_unsigned() ||
                       v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
    CLEAVE_CHECK(fits, "{} holds {}, expected integers that fit 64 bits", key,
                 v.dump(-1, ' ', false, json::error_handler_t::replace));
    out.push_back(v.get<std::int64_t>());
  }
  return out;
}

}  // namespace

std::size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "I64") return 8;
  CLEAVE_THROW("safetensors dtype '{}' is not supported (expected F32, BF16, F16 or I64)", dtype);
}

WrittenFile write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata, std::int64_t chunk_bytes) {
  CLEAVE_CHECK(chunk_bytes >= 0, "checkpoint file {}: chunk_bytes {} is negative", path, chunk_bytes);
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::int64_t offset = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    CLEAVE_CHECK(t.name != "__metadata__" && names.insert(t.name).second,
                 "checkpoint file {}: tensor name '{}' is repeated or reserved", path, t.name);
    const std::int64_t expected = numel_of(t.shape) * static_cast<std::int64_t>(safetensors_dtype_size(t.dtype));
    CLEAVE_CHECK(static_cast<std::int64_t>(t.bytes.size()) == expected,
                 "checkpoint file {}: tensor {} has {} bytes, but shape {} of {} needs {}", path, t.name,
                 t.bytes.size(), shape_text(t.shape), t.dtype, expected);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');  // the data section starts 8-byte aligned
  std::byte length[8];
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CLEAVE_CHECK(fd >= 0, "checkpoint file {}: cannot create ({})", path, std::strerror(errno));
  std::uint64_t hash = kFnv1a64Offset;
  WrittenFile out;
  try {
    const auto put = [&](const std::byte* data, std::size_t size) {
      write_all(fd, path, data, size);
      hash = fnv1a64_update(hash, std::span(data, size));
    };
    put(length, 8);
    put(reinterpret_cast<const std::byte*>(text.data()), text.size());
    out.header_checksum = hash;
    for (const auto& t : tensors) {
      if (chunk_bytes == 0) {
        put(t.bytes.data(), t.bytes.size());
        continue;
      }
      auto& chunks = out.chunk_checksums.emplace_back();
      for (std::size_t at = 0; at < t.bytes.size(); at += static_cast<std::size_t>(chunk_bytes)) {
        const auto chunk = t.bytes.subspan(at, std::min(t.bytes.size() - at, static_cast<std::size_t>(chunk_bytes)));
        put(chunk.data(), chunk.size());
        chunks.push_back(fnv1a64(chunk));
      }
    }
    CLEAVE_CHECK(::fsync(fd) == 0, "checkpoint file {}: fsync failed ({})", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  CLEAVE_CHECK(::close(fd) == 0, "checkpoint file {}: close failed ({})", path, std::strerror(errno));
  out.bytes = static_cast<std::int64_t>(8 + text.size()) + offset;
  out.checksum = hash;
  return out;
}

const TensorRecord& SafetensorsFile::record(const std::string& name) const {
  auto it = tensors.find(name);
  CLEAVE_CHECK(it != tensors.end(), "checkpoint file {}: tensor {} is missing (the file holds {} tensors)", path,
               name, tensors.size());
  return it->second;
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name) const {
  const TensorRecord& r = record(name);
  return std::span(data.data() + r.begin, static_cast<std::size_t>(r.end - r.begin));
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  CLEAVE_CHECK(f != nullptr, "checkpoint file {}: cannot open ({})", path, std::strerror(errno));
  std::vector<std::byte> all;
  {
    std::byte buffer[1 << 16];
    for (;;) {
      const std::size_t n = std::fread(buffer, 1, sizeof buffer, f);
      all.insert(all.end(), buffer, buffer + n);
      if (n < sizeof buffer) break;
    }
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  CLEAVE_CHECK(!failed, "checkpoint file {}: read error", path);
  return parse_safetensors(all, path);
}

namespace {

// The header length in the first 8 bytes of a `size`-byte file, checked against the size.
std::uint64_t header_length(std::span<const std::byte> first8, std::uint64_t size, const std::string& path) {
  CLEAVE_CHECK(size >= 8, "checkpoint file {}: {} bytes is shorter than the 8-byte header length (truncated?)", path,
               size);
  std::uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<std::uint64_t>(first8[static_cast<std::size_t>(i)]) << (8 * i);
  CLEAVE_CHECK(header_len <= size - 8,
               "checkpoint file {}: header length {} exceeds the {} bytes after the length field (truncated or "
               "corrupt)",
               path, header_len, size - 8);
  return header_len;
}

// The header's JSON object.
json header_json(std::span<const std::byte> header_text, const std::string& path) {
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(header_text.data()),
                         reinterpret_cast<const char*>(header_text.data()) + header_text.size());
  } catch (const json::exception& e) {
    CLEAVE_THROW("checkpoint file {}: the {}-byte JSON header does not parse ({})", path, header_text.size(),
                 library_detail(e));
  }
  CLEAVE_CHECK(header.is_object(), "checkpoint file {}: the JSON header is not an object", path);
  return header;
}

// The header's __metadata__ entry: an object of strings.
std::map<std::string, std::string> metadata_of(const json& entry, const std::string& path) {
  CLEAVE_CHECK(entry.is_object(), "checkpoint file {}: __metadata__ is not an object", path);
  std::map<std::string, std::string> metadata;
  for (const auto& [k, v] : entry.items()) {
    CLEAVE_CHECK(v.is_string(), "checkpoint file {}: __metadata__.{} is not a string", path, k);
    metadata[k] = v.get<std::string>();
  }
  return metadata;
}

// The dtype, shape and data offsets of tensor `name`'s header entry, as written (nothing checked against the data).
TensorRecord tensor_fields(const std::string& name, const json& entry, const std::string& path) {
  CLEAVE_CHECK(entry.is_object(), "checkpoint file {}: tensor {}: the header entry is {}, expected an object with "
               "dtype, shape and data_offsets", path, name, entry.type_name());
  TensorRecord r;
  try {
    r.dtype = entry.at("dtype").get<std::string>();
    r.shape = integers(entry.at("shape"), "shape");
    const auto offsets = integers(entry.at("data_offsets"), "data_offsets");
    CLEAVE_CHECK(offsets.size() == 2, "data_offsets has {} values, expected 2", offsets.size());
    r.begin = offsets[0];
    r.end = offsets[1];
  } catch (const json::exception& e) {
    CLEAVE_THROW("checkpoint file {}: tensor {}: malformed header entry ({})", path, name, library_detail(e));
  } catch (const Error& e) {
    CLEAVE_THROW("checkpoint file {}: tensor {}: malformed header entry ({})", path, name, e.what());
  }
  return r;
}

// Tensor `name`'s record checked against a data section of `data_size` bytes: a known dtype, no negative extent,
// offsets inside the section, and exactly numel × dtype size bytes between them.
void check_tensor_bytes(const std::string& name, const TensorRecord& r, std::int64_t data_size,
                        const std::string& path) {
  std::int64_t dsize = 0;
  try {
    dsize = static_cast<std::int64_t>(safetensors_dtype_size(r.dtype));
  } catch (const Error& e) {
    CLEAVE_THROW("checkpoint file {}: tensor {}: {}", path, name, e.what());
  }
  // numel × dtype size, stopped as soon as it passes the data section (so the product cannot overflow).
  std::int64_t expected = dsize;
  for (std::int64_t d : r.shape) {
    CLEAVE_CHECK(d >= 0, "checkpoint file {}: tensor {} has a negative extent in shape {}", path, name,
                 shape_text(r.shape));
    if (d == 0) expected = 0;
    else if (expected <= data_size) expected = expected > data_size / d ? data_size + 1 : expected * d;
  }
  CLEAVE_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= data_size,
               "checkpoint file {}: tensor {} has data_offsets [{}, {}] outside the {}-byte data section", path,
               name, r.begin, r.end, data_size);
  CLEAVE_CHECK(expected <= data_size,
               "checkpoint file {}: tensor {} has shape {} of {}, more than the {}-byte data section holds", path,
               name, shape_text(r.shape), r.dtype, data_size);
  CLEAVE_CHECK(r.end - r.begin == expected,
               "checkpoint file {}: tensor {} spans {} bytes but shape {} of {} needs {}", path, name,
               r.end - r.begin, shape_text(r.shape), r.dtype, expected);
}

// The tensors' byte ranges, in order of their start, tile the `data_size`-byte data section: no gap, no overlap.
void check_tensors_tile(const std::map<std::string, TensorRecord>& tensors, std::int64_t data_size,
                        const std::string& path) {
  std::vector<std::pair<std::int64_t, std::string>> by_begin;
  for (const auto& [name, r] : tensors) by_begin.emplace_back(r.begin, name);
  std::sort(by_begin.begin(), by_begin.end());
  std::int64_t covered = 0;
  for (const auto& [begin, name] : by_begin) {
    CLEAVE_CHECK(begin == covered,
                 "checkpoint file {}: tensor {} starts at byte {} but the previous data ends at {} ({}; offsets must "
                 "cover the data exactly)",
                 path, name, begin, covered, begin > covered ? "a gap" : "an overlap");
    covered = tensors.at(name).end;
  }
  CLEAVE_CHECK(covered == data_size,
               "checkpoint file {}: the tensors cover {} bytes but the data section holds {} (truncated, or bytes "
               "after the last tensor)",
               path, covered, data_size);
}

// Every check of the header (header_text) of a `size`-byte file; `data` is left empty.
SafetensorsFile parse_header(std::span<const std::byte> header_text, std::uint64_t size, const std::string& path) {
  const std::uint64_t header_len = header_text.size();
  const json header = header_json(header_text, path);
  SafetensorsFile out;
  out.path = path;
  const std::int64_t data_size = static_cast<std::int64_t>(size - 8 - header_len);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = metadata_of(entry, path);
      continue;
    }
    TensorRecord r = tensor_fields(name, entry, path);
    check_tensor_bytes(name, r, data_size, path);
    out.tensors.emplace(name, std::move(r));
  }
  check_tensors_tile(out.tensors, data_size, path);
  out.data_offset = static_cast<std::int64_t>(8 + header_len);
  return out;
}

}  // namespace

SafetensorsFile parse_safetensors(std::span<const std::byte> all, const std::string& path) {
  try {
    const auto size = static_cast<std::uint64_t>(all.size());
    const std::uint64_t header_len = header_length(all.first(std::min<std::size_t>(all.size(), 8)), size, path);
    SafetensorsFile out = parse_header(all.subspan(8, header_len), size, path);
    out.data.assign(all.begin() + static_cast<std::ptrdiff_t>(8 + header_len), all.end());
    return out;
  } catch (const Error& e) {
    rethrow_one_line(e);  // names and keys quoted from the input may hold control characters
  }
}

SafetensorsFile read_safetensors_header(const std::string& path, std::optional<std::uint64_t> expected_checksum) {
  try {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    CLEAVE_CHECK(f != nullptr, "checkpoint file {}: cannot open ({})", path, std::strerror(errno));
    const auto close_and_fail = [&](std::string message) {
      std::fclose(f);
      throw Error(std::move(message));
    };
    const long end = std::fseek(f, 0, SEEK_END) == 0 ? std::ftell(f) : -1;
    if (end < 0 || std::fseek(f, 0, SEEK_SET) != 0) {
      close_and_fail(fmt::format("checkpoint file {}: cannot find its size", path));
    }
    const auto size = static_cast<std::uint64_t>(end);
    std::byte first8[8] = {};
    const std::size_t got = std::fread(first8, 1, std::min<std::uint64_t>(size, 8), f);
    std::uint64_t header_len = 0;
    try {
      header_len = header_length(std::span<const std::byte>(first8, got), size, path);
    } catch (const Error& e) {
      close_and_fail(e.what());
    }
    std::vector<std::byte> header(header_len);  // at most the file's size (checked above)
    const bool read = std::fread(header.data(), 1, header.size(), f) == header.size();
    std::fclose(f);
    CLEAVE_CHECK(read, "checkpoint file {}: read error in the {}-byte header", path, header_len);
    if (expected_checksum) {
      const std::uint64_t hash = fnv1a64_update(fnv1a64(std::span<const std::byte>(first8, got)), header);
      CLEAVE_CHECK(hash == *expected_checksum,
                   "checkpoint file {}: checksum {} of its {}-byte header does not match {} recorded in index.json; "
                   "the file is corrupt",
                   path, checksum_text(hash), 8 + header_len, checksum_text(*expected_checksum));
    }
    return parse_header(header, size, path);
  } catch (const Error& e) {
    rethrow_one_line(e);
  }
}

}  // namespace cleave::checkpoint
