// Fuzz target: the strict config reader with --set overrides (engine/config/config.hpp).
//
// Input: JSON text, optionally followed by a line "--set" and one override ("key.path=value") per line,
// as `cleave train CONFIG --set ...` would pass them. Contract (fuzz_contract.hpp): parse_config returns or
// throws one cleave::Error line. A config that parses must also survive what the engine does next: its
// to_json() text parses back to an equal config, and resolve() for the world size its layout implies either
// works or throws cleave::Error.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.hpp"
#include "fuzz_contract.hpp"

namespace {

constexpr std::string_view kTarget = "config_fuzz";
constexpr std::string_view kSeparator = "\n--set\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cleave;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find(kSeparator);
  const std::string_view json_text = input.substr(0, split);
  std::vector<std::string> overrides;
  if (split != std::string_view::npos) {
    std::string_view rest = input.substr(split + kSeparator.size());
    while (!rest.empty()) {
      const std::size_t eol = rest.find('\n');
      overrides.emplace_back(rest.substr(0, eol));
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    }
  }
  config::RunConfig parsed;
  const bool ok = fuzz::parses_or_errors(kTarget, [&] { parsed = config::parse_config(json_text, "<fuzz>", overrides); });
  if (!ok) return 0;

  // What was accepted writes itself out completely and reads back the same.
  config::RunConfig again;
  fuzz::expect(fuzz::parses_or_errors(kTarget, [&] { again = config::parse_config(config::to_json(parsed), "<to_json>"); }),
               kTarget, "to_json() of an accepted config does not parse back");
  fuzz::expect(again == parsed, kTarget, "parse_config(to_json(c)) != c");

  // The world size the layout asks for (dp 1 when inferred), as a launcher would provide it.
  const std::int64_t dp = parsed.parallel.data_parallel_size > 0 ? parsed.parallel.data_parallel_size : 1;
  const std::int64_t world = static_cast<std::int64_t>(parsed.parallel.tensor_model_parallel_size) *
                             parsed.parallel.pipeline_model_parallel_size * dp;
  for (std::int64_t size : {std::int64_t{1}, world}) {
    if (size > std::numeric_limits<int>::max()) continue;
    config::RunConfig resolved = parsed;
    fuzz::parses_or_errors(kTarget, [&] {
      resolved.resolve(static_cast<int>(size));
      (void)resolved.resolved_batch();
    });
  }
  return 0;
}
