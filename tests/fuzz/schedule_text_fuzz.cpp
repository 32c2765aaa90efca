// Fuzz target: the schedule text parser (pipeline/schedule_text.hpp), and what `cleave simulate --schedule
// FILE` does with a parsed file: validate it and, when valid, simulate it.
//
// Contract (fuzz_contract.hpp): parse_schedule returns or throws one cleave::Error line. A schedule that
// parses formats to text that parses back to the same schedule (the name aside: a file without a usable
// name line is named after its source); the validator returns a verdict (it does not
// throw); the simulator runs a valid schedule or throws cleave::Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_contract.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/validator.hpp"

namespace {
constexpr std::string_view kTarget = "schedule_text_fuzz";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cleave::pipeline;
  namespace fuzz = cleave::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Schedule schedule;
  if (!fuzz::parses_or_errors(kTarget, [&] { schedule = parse_schedule(text, "<fuzz>"); })) return 0;

  const std::string formatted = format_schedule(schedule);
  Schedule again;
  fuzz::expect(fuzz::parses_or_errors(kTarget, [&] { again = parse_schedule(formatted, "<format>"); }), kTarget,
               "format_schedule() of a parsed schedule does not parse back");
  again.name = schedule.name;  // a name the text cannot carry ("", '#', spaces) falls back to the source name
  fuzz::expect(format_schedule(again) == formatted, kTarget, "parse(format(s)) differs from s");

  ValidationResult verdict;
  fuzz::expect(fuzz::parses_or_errors(kTarget, [&] { verdict = validate_schedule(schedule); }), kTarget,
               "validate_schedule threw instead of returning a verdict");
  if (!verdict.ok) return 0;
  fuzz::parses_or_errors(kTarget, [&] {
    (void)simulate(schedule, SimulationCosts::uniform(schedule.num_stages));
  });
  return 0;
}
