// Writing llm.c token shards, the format token_file.hpp reads (TokenFormat::kLlmc): a 256 × int32 header
// {kLlmcMagic, kLlmcVersion, token count, 0...} then the tokens as little-endian uint16.
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

}  // namespace cleave::train
