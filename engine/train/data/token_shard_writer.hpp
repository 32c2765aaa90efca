// Writing llm.c token shards, the format token_file.hpp reads (TokenFormat::kLlmc): a 256 × int32 header
// {magic, version, token count, 0...} then the tokens little-endian: {kLlmcMagic, kLlmcVersion} and uint16 ids,
// or {kLlmcMagic32, kLlmcVersion32} and uint32 ids (llm.c's Llama 3 shards).
//
// Invariant: a shard is written whole or not at all: the bytes go to "<path>.tmp", which is renamed to
// `path` once complete; an existing `path` is refused before anything is written.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace cleave::train {

// Throws Error naming the file: `path` exists, 0 tokens, more than 2^31 - 1 tokens (the header's int32
// count), or an I/O failure.
void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens);
// `ids` as 16-bit (bits 16; each id < 65536) or 32-bit shard (bits 32; each id ≥ 0). Same errors.
void write_llmc_shard(const std::string& path, std::span<const std::int32_t> ids, int bits);

}  // namespace cleave::train
