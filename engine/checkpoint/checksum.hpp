// The 64-bit checksum recorded for every checkpoint file in index.json: FNV-1a over the file's bytes.
//
// Invariant: a pure function of the bytes (no seed, no state); fnv1a64(a ++ b) == fnv1a64_update(fnv1a64(a), b),
// so a file can be hashed while it is written, chunk by chunk. Not cryptographic: it catches truncation,
// bit rot and partial writes, not an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cleave::checkpoint {

inline constexpr std::uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// Continues a running hash over `bytes`; start from kFnv1a64Offset.
std::uint64_t fnv1a64_update(std::uint64_t hash, std::span<const std::byte> bytes);
inline std::uint64_t fnv1a64(std::span<const std::byte> bytes) { return fnv1a64_update(kFnv1a64Offset, bytes); }

// Checksum of a whole file, and its hex form "fnv1a64:0123456789abcdef" as index.json records it. Throws
// Error naming the file when it cannot be read.
std::uint64_t file_checksum(const std::string& path);
std::string checksum_text(std::uint64_t hash);

}  // namespace cleave::checkpoint
