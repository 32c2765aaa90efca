// Fuzz target: the llm.c shard / uint16 / text token-file header reader (engine/train/data/token_file.hpp).
//
// The input is a whole file's bytes, read in each of the three formats by locate_tokens, the function
// TokenFile runs on the mapped file. Contract (fuzz_contract.hpp): it returns a range or throws one
// cleave::Error line; a returned range lies inside the input (every token is read here, so ASan reports a
// range that reaches past the end) and a header that was accepted says exactly how many tokens follow.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "engine/train/data/token_file.hpp"
#include "fuzz_contract.hpp"

namespace {
constexpr std::string_view kTarget = "token_file_fuzz";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cleave::train;
  namespace fuzz = cleave::fuzz;
  const std::span<const std::uint8_t> bytes(data, size);
  for (TokenFormat format : {TokenFormat::kLlmc, TokenFormat::kUint16, TokenFormat::kText}) {
    TokenRange range;
    if (!fuzz::parses_or_errors(kTarget, [&] { range = locate_tokens(bytes, format, "data file <fuzz>"); })) continue;
    const std::int64_t width = range.width;
    fuzz::expect(range.offset >= 0 && range.count > 0 &&
                     range.offset + range.count * width == static_cast<std::int64_t>(size),
                 kTarget, "accepted token range does not end at the end of the file");
    volatile std::uint32_t sink = 0;  // reads every token the range claims (ASan checks the bounds)
    for (std::int64_t i = 0; i < range.count; ++i) {
      std::uint32_t token = 0;
      std::memcpy(&token, data + range.offset + i * width, static_cast<std::size_t>(width));
      sink = token;
    }
    (void)sink;
  }
  return 0;
}
