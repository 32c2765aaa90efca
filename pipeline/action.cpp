// Schedule actions: token tables, formatting and parsing (grammar in action.hpp).
#include "pipeline/action.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "engine/core/error.hpp"

namespace cleave::pipeline {
namespace {

struct KindInfo {
  ActionKind kind;
  std::string_view token;
};

// The parser reads the whole upper-case run of a token and looks it up here.
constexpr KindInfo kKindTokens[] = {
    {ActionKind::kForward, "F"},
    {ActionKind::kBackwardInput, "I"},
    {ActionKind::kBackwardWeight, "W"},
    {ActionKind::kBackward, "B"},
    {ActionKind::kSendF, "SEND_F"},
    {ActionKind::kRecvF, "RECV_F"},
    {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"},
    {ActionKind::kReduceGrad, "REDUCE_GRAD"},
    {ActionKind::kOptimizerStep, "OPTIMIZER_STEP"},
};

const KindInfo& info(ActionKind kind) {
  for (const auto& entry : kKindTokens) {
    if (entry.kind == kind) return entry;
  }
  CLEAVE_ASSERT(false, "unknown ActionKind {}", static_cast<int>(kind));
  return kKindTokens[0];
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool parse_number(std::string_view digits, int& out) {
  if (digits.empty() || digits.size() > 9) return false;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return ec == std::errc() && ptr == digits.data() + digits.size();
}

}  // namespace

bool is_compute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight || kind == ActionKind::kBackward;
}

bool is_send(ActionKind kind) { return kind == ActionKind::kSendF || kind == ActionKind::kSendB; }
bool is_recv(ActionKind kind) { return kind == ActionKind::kRecvF || kind == ActionKind::kRecvB; }
bool is_communication(ActionKind kind) { return is_send(kind) || is_recv(kind); }

bool has_stage(ActionKind kind) { return kind != ActionKind::kOptimizerStep; }
bool has_microbatch(ActionKind kind) {
  return kind != ActionKind::kOptimizerStep && kind != ActionKind::kReduceGrad;
}

std::string_view action_kind_token(ActionKind kind) { return info(kind).token; }

std::string format_action(const Action& action) {
  const auto token = action_kind_token(action.kind);
  if (!has_stage(action.kind)) return std::string(token);
  if (!has_microbatch(action.kind)) return fmt::format("{}{}", action.stage, token);
  return fmt::format("{}{}{}", action.stage, token, action.microbatch);
}

bool try_parse_action(std::string_view token, Action& action, std::string& why) {
  std::size_t pos = 0;
  while (pos < token.size() && is_digit(token[pos])) ++pos;
  const std::string_view stage_digits = token.substr(0, pos);
  const std::size_t kind_begin = pos;
  while (pos < token.size() && (std::isupper(static_cast<unsigned char>(token[pos])) || token[pos] == '_')) ++pos;
  const std::string_view kind_text = token.substr(kind_begin, pos - kind_begin);
  const std::string_view mb_digits = token.substr(pos);

  const KindInfo* found = nullptr;
  for (const auto& entry : kKindTokens) {
    if (entry.token == kind_text) found = &entry;
  }
  if (found == nullptr) {
    why = fmt::format("unknown action kind '{}' (expected F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD "
                      "or OPTIMIZER_STEP, written like 2F5, 1SEND_B3, 0REDUCE_GRAD)",
                      kind_text);
    return false;
  }
  Action parsed{found->kind, -1, -1};
  if (has_stage(found->kind)) {
    if (!parse_number(stage_digits, parsed.stage)) {
      why = fmt::format("{} needs a stage number before it (like 2{}{})", found->token, found->token,
                        has_microbatch(found->kind) ? "5" : "");
      return false;
    }
  } else if (!stage_digits.empty()) {
    why = fmt::format("{} takes no stage number", found->token);
    return false;
  }
  if (has_microbatch(found->kind)) {
    if (!parse_number(mb_digits, parsed.microbatch)) {
      why = mb_digits.empty()
                ? fmt::format("{} needs a micro-batch number after it (like {}{}5)", found->token, parsed.stage,
                              found->token)
                : fmt::format("'{}' is not a micro-batch number", mb_digits);
      return false;
    }
  } else if (!mb_digits.empty()) {
    why = fmt::format("{} takes no micro-batch number (found trailing '{}')", found->token, mb_digits);
    return false;
  }
  action = parsed;
  return true;
}

Action parse_action(std::string_view token) {
  Action action;
  std::string why;
  CLEAVE_CHECK(try_parse_action(token, action, why), "bad action token '{}': {}", token, why);
  return action;
}

}  // namespace cleave::pipeline
