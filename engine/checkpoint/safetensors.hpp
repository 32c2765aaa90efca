// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N
// bytes of JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the tensors' bytes packed back to back (offsets relative to the end of the header).
//
// Invariants kept by write_safetensors and checked by read_safetensors (every violation is an Error naming
// the file and, where there is one, the tensor and the numbers):
//  - N + 8 <= file size, the header is a JSON object, every entry has a known dtype (F32, BF16, F16, I64), a
//    shape of non-negative extents (numel × dtype size within the data section, so it cannot overflow) and
//    end - begin == numel × dtype size;
//  - sorted by begin, the entries cover [0, data size) exactly: no gap, no overlap, nothing after the last.
// Pure I/O: no tensors, no devices; the caller owns the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cleave::checkpoint {

// "F32" 4, "BF16" 2, "F16" 2 (Hugging Face checkpoints), "I64" 8; throws Error for any other name.
std::size_t safetensors_dtype_size(const std::string& dtype);

struct TensorToWrite {
  std::string name;
  std::string dtype;  // "F32" | "BF16" | "F16" | "I64"
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;  // numel × dtype size bytes, borrowed for the call
};

struct WrittenFile {
  std::int64_t bytes = 0;     // file size
  std::uint64_t checksum = 0;  // fnv1a64 of the whole file (checksum.hpp)
  std::uint64_t header_checksum = 0;  // fnv1a64 of the 8-byte length and the JSON header (data_offset bytes)
  // With chunk_bytes > 0: per tensor (in the order given), fnv1a64 of each chunk_bytes-long chunk of its bytes
  // (the last one shorter), so a reader of part of a tensor verifies only the chunks it reads.
  std::vector<std::vector<std::uint64_t>> chunk_checksums;
};

// Writes `tensors` (names unique) in the given order, with `metadata` as "__metadata__", to `path`
// (created or truncated) and fsyncs it. `chunk_bytes` > 0 also hashes each tensor in chunks (WrittenFile).
// Throws Error naming the file and tensor on a bad entry or an I/O failure.
WrittenFile write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {}, std::int64_t chunk_bytes = 0);

struct TensorRecord {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0;  // byte offsets into SafetensorsFile::data
  std::int64_t end = 0;
};

struct SafetensorsFile {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::map<std::string, TensorRecord> tensors;
  std::vector<std::byte> data;  // the data section (empty from read_safetensors_header)
  std::int64_t data_offset = 0;  // where the data section starts in the file (8 + header length)

  // The record of `name`; throws Error naming the file and the tensor when absent.
  const TensorRecord& record(const std::string& name) const;
  // The bytes of `name`.
  std::span<const std::byte> bytes(const std::string& name) const;
};

// Reads and validates the whole file (see the invariants above). Throws Error naming the file.
SafetensorsFile read_safetensors(const std::string& path);
// The same checks reading only the 8-byte length and the JSON header (offsets are checked against the file's
// size); `data` stays empty: read tensors' bytes at data_offset + begin. With `expected_checksum`, those bytes
// must hash to it (WrittenFile::header_checksum) before they are parsed. Throws Error naming the file.
SafetensorsFile read_safetensors_header(const std::string& path,
                                        std::optional<std::uint64_t> expected_checksum = std::nullopt);
// The same checks on a file's bytes already in memory; `path` names it in messages. Every number in the
// header is checked against bytes.size() before it is used, so no allocation or read follows an unchecked
// number (fuzzed: tests/fuzz/safetensors_fuzz.cpp).
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& path);

}  // namespace cleave::checkpoint
