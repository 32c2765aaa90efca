// CLEAVE_FAULT_INJECT parsing and firing (fault_injection.hpp).
#include "engine/train/fault_injection.hpp"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"

namespace cleave::train {
namespace {

constexpr const char* kForm =
    "expected RANK:STEP:WHERE[:ACTION] with WHERE forward|dp_reduce|save and ACTION throw|kill|stop, e.g. 1:3:forward:kill";

std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const std::size_t colon = text.find(':', at);
    parts.push_back(text.substr(at, colon == std::string_view::npos ? std::string_view::npos : colon - at));
    if (colon == std::string_view::npos) return parts;
    at = colon + 1;
  }
}

template <typename T>
T number(std::string_view part, std::string_view text, std::string_view what, T min) {
  T value{};
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
  CLEAVE_CHECK(ec == std::errc() && end == part.data() + part.size() && value >= min,
               "CLEAVE_FAULT_INJECT='{}': {} '{}' is not an integer >= {} ({})", text, what, part, min, kForm);
  return value;
}

}  // namespace

FaultPlan parse_fault_plan(std::string_view text) {
  const auto parts = split(text);
  CLEAVE_CHECK(parts.size() == 3 || parts.size() == 4, "CLEAVE_FAULT_INJECT='{}': {}", text, kForm);
  FaultPlan plan;
  plan.rank = number<int>(parts[0], text, "RANK", 0);
  plan.step = number<std::int64_t>(parts[1], text, "STEP", 1);
  if (parts[2] == "forward") plan.point = FaultPoint::kForward;
  else if (parts[2] == "dp_reduce") plan.point = FaultPoint::kDpReduce;
  else if (parts[2] == "save") plan.point = FaultPoint::kSave;
  else CLEAVE_THROW("CLEAVE_FAULT_INJECT='{}': WHERE '{}' is unknown ({})", text, parts[2], kForm);
  if (parts.size() == 4) {
    if (parts[3] == "throw") plan.action = FaultAction::kThrow;
    else if (parts[3] == "kill") plan.action = FaultAction::kKill;
    else if (parts[3] == "stop") plan.action = FaultAction::kStop;
    else CLEAVE_THROW("CLEAVE_FAULT_INJECT='{}': ACTION '{}' is unknown ({})", text, parts[3], kForm);
  }
  return plan;
}

std::optional<FaultPlan> fault_plan_from_env() {
  const char* value = std::getenv("CLEAVE_FAULT_INJECT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return parse_fault_plan(value);
}

void FaultPlan::fire(std::string_view what) {
  fired = true;
  const char* verb = action == FaultAction::kKill ? "SIGKILLs itself" : action == FaultAction::kStop ? "SIGSTOPs itself"
                                                                                                   : "throws";
  // One write, so the drill's log shows where the fault was injected even when the rank then dies.
  const std::string line = fmt::format("[rank {}] fault injection (CLEAVE_FAULT_INJECT): step {}, {}: rank {} {}\n",
                                       rank, step, what, rank, verb);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  switch (action) {
    case FaultAction::kKill: ::raise(SIGKILL); break;
    case FaultAction::kStop: ::raise(SIGSTOP); break;
    case FaultAction::kThrow:
      CLEAVE_THROW("injected fault (CLEAVE_FAULT_INJECT) in step {}, {} on rank {}", step, what, rank);
  }
}

}  // namespace cleave::train
