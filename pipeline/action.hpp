// Schedule actions: the instruction set a pipeline schedule is written in (docs/architecture.md).
//
// An Action names what one pp rank does next: compute (F, I, W, B) on one (stage, micro-batch),
// point-to-point transfers added by lowering (SEND_F, RECV_F, SEND_B, RECV_B), the data-parallel gradient
// reduction of a stage (REDUCE_GRAD) and the optimizer step. Actions are plain values; a schedule is
// nothing but lists of them (schedule.hpp).
//
// Text tokens (one per action; stage and micro-batch are decimal, 0-based):
//   2F5  2I5  2W5  2B5             compute on stage 2, micro-batch 5
//   1SEND_F5  2RECV_F5            stage 1 sends its output activation of micro-batch 5 to stage 2, which
//                                 receives it (the stage number is always the stage doing the op)
//   2SEND_B5  1RECV_B5            stage 2 sends the gradient of its input back to stage 1
//   2REDUCE_GRAD                  reduce stage 2's gradients across data-parallel replicas
//   OPTIMIZER_STEP                the rank's optimizer step (last action of every lowered rank)
// To add a kind: extend ActionKind, kKindTokens in action.cpp, and every switch that the compiler flags.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

namespace cleave::pipeline {

enum class ActionKind : std::uint8_t {
  kForward,         // F: forward; stashes what backward needs
  kBackwardInput,   // I: gradient w.r.t. the stage input (keeps what W needs)
  kBackwardWeight,  // W: weight gradient, accumulated; frees the micro-batch's stash
  kBackward,        // B: I and W fused; frees the stash
  kSendF,           // send this stage's output activation to stage + 1
  kRecvF,           // receive stage − 1's output activation
  kSendB,           // send the gradient of this stage's input to stage − 1
  kRecvB,           // receive stage + 1's input gradient
  kReduceGrad,      // data-parallel reduction of this stage's gradients (no micro-batch)
  kOptimizerStep,   // optimizer step of the rank (no stage, no micro-batch)
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = -1;       // -1 for kOptimizerStep
  int microbatch = -1;  // -1 for kReduceGrad and kOptimizerStep

  friend bool operator==(const Action&, const Action&) = default;
  friend auto operator<=>(const Action&, const Action&) = default;
};

// F, I, W, B.
bool is_compute(ActionKind kind);
// SEND_F, RECV_F, SEND_B, RECV_B.
bool is_communication(ActionKind kind);
bool is_send(ActionKind kind);
bool is_recv(ActionKind kind);
// I or B: the actions that produce the gradient flowing to the previous stage.
inline bool is_backward_input(ActionKind kind) {
  return kind == ActionKind::kBackwardInput || kind == ActionKind::kBackward;
}
// W or B: the actions that free a stash and finish a stage's weight gradient for one micro-batch.
inline bool frees_stash(ActionKind kind) {
  return kind == ActionKind::kBackwardWeight || kind == ActionKind::kBackward;
}
// Whether the kind carries a stage / a micro-batch.
bool has_stage(ActionKind kind);
bool has_microbatch(ActionKind kind);

// "F", "SEND_F", "REDUCE_GRAD", ...
std::string_view action_kind_token(ActionKind kind);

// "2F5", "1SEND_B3", "0REDUCE_GRAD", "OPTIMIZER_STEP".
std::string format_action(const Action& action);

// Parses one token. Returns false and sets `why` (no location; the caller adds file, line and token).
bool try_parse_action(std::string_view token, Action& action, std::string& why);
// Throws Error("bad action token '...': why").
Action parse_action(std::string_view token);

}  // namespace cleave::pipeline
