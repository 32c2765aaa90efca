// Fuzz target: the byte-level BPE tokenizer (engine/tokenizer): the hand-written pre-tokenizer scanners, BPE
// merging, added-token matching and the tokenizer.json reader.
//
// The first input byte picks the mode, the rest is the text. Modes 0-3 encode the text with the tiny
// tokenizer of tests/unit/tokenizer/tiny_tokenizer.hpp (GPT-2 pattern, Llama 3 pattern, with add_prefix_space,
// with ignore_merges). Contract (fuzz_contract.hpp): encode returns ids or throws one cleave::Error line
// (invalid UTF-8); when it returns, every pre-token is non-empty and inside the text, every id has a token and
// decode(encode(x)) == x (add_prefix_space adds spaces, so there only the ids are checked). Mode 4 reads the
// text as a tokenizer.json: it builds a Tokenizer or throws one cleave::Error line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/tokenizer/unicode_classes.hpp"
#include "fuzz_contract.hpp"
#include "tests/unit/tokenizer/tiny_tokenizer.hpp"

namespace {
constexpr std::string_view kTarget = "tokenizer_fuzz";

cleave::tokenizer::Tokenizer make(const cleave::tokenizer::testing::TinyOptions& options) {
  return cleave::tokenizer::Tokenizer(cleave::tokenizer::parse_tokenizer_json(
      cleave::tokenizer::testing::tiny_tokenizer_json(options).dump(), "tokenizer tiny.json"));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cleave::tokenizer;
  namespace fuzz = cleave::fuzz;
  if (size == 0) return 0;
  static Tokenizer tokenizers[] = {make({}), make({.llama3 = true}), make({.add_prefix_space = true}),
                                   make({.llama3 = true, .ignore_merges = true})};
  const int mode = data[0] % 5;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode == 4) {
    fuzz::parses_or_errors(kTarget, [&] { Tokenizer(parse_tokenizer_json(text, "tokenizer <fuzz>")); });
    return 0;
  }
  Tokenizer& tok = tokenizers[mode];
  std::vector<std::int32_t> ids;
  if (!fuzz::parses_or_errors(kTarget, [&] { ids = tok.encode(text); })) {
    fuzz::expect(first_invalid_utf8(text) < text.size(), kTarget, "valid UTF-8 was refused");
    return 0;
  }
  for (SplitPattern pattern : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t end = pre_token_end(pattern, text, pos);
      fuzz::expect(end > pos && end <= text.size(), kTarget, "a pre-token is empty or runs past the text");
      pos = end;
    }
  }
  for (std::int32_t id : ids) fuzz::expect(tok.has_token(id), kTarget, "an id without a token");
  if (mode != 2) fuzz::expect(tok.decode(ids) == text, kTarget, "decode(encode(x)) != x");
  return 0;
}
