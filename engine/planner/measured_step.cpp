// See measured_step.hpp.
#include "engine/planner/measured_step.hpp"
#include "engine/planner/median.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "pipeline/trace.hpp"

namespace cleave::planner {
namespace {

using pipeline::ActionKind;
using Key = std::tuple<ActionKind, int, int>;  // kind, stage, micro-batch

Key key_of(const pipeline::Action& a) { return {a.kind, a.stage, a.microbatch}; }

ActionKind kind_from_token(std::string_view token, const std::string& what) {
  for (int k = 0; k <= static_cast<int>(ActionKind::kOptimizerStep); ++k) {
    const auto kind = static_cast<ActionKind>(k);
    if (pipeline::action_kind_token(kind) == token) return kind;
  }
  CLEAVE_THROW("{}: unknown action kind '{}' in a trace event's \"cat\" (a trace.json written by train.trace holds F, "
               "I, W, B, SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD, OPTIMIZER_STEP)", what, token);
}

// Which kind of action a work span's time counts in (B with I: fused, it is the backward).
StepAction action_row(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return StepAction::kForward;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward: return StepAction::kInputGrad;
    case ActionKind::kBackwardWeight: return StepAction::kWeightGrad;
    case ActionKind::kReduceGrad: return StepAction::kReduceGrad;
    default: return StepAction::kOptimizer;
  }
}

// The SEND whose tensor `action` waits for, when the rank received it from a peer (it holds the matching RECV).
bool needed_send(const pipeline::Action& a, const std::set<Key>& recvs, Key& send) {
  if (a.kind == ActionKind::kForward && recvs.count({ActionKind::kRecvF, a.stage, a.microbatch})) {
    send = {ActionKind::kSendF, a.stage - 1, a.microbatch};
    return true;
  }
  if (pipeline::is_backward_input(a.kind) && recvs.count({ActionKind::kRecvB, a.stage, a.microbatch})) {
    send = {ActionKind::kSendB, a.stage + 1, a.microbatch};
    return true;
  }
  return false;
}

std::string ratio_text(double predicted, double measured) {
  return measured > 0 ? fmt::format("{:.2f}", predicted / measured) : std::string("-");
}

// The planner's term for each kind of measured wait (layers::CommKind order: tp, cp, zero_gather, expert_all_to_all).
constexpr std::array<StepTerm, pipeline::kNumCommWaitKinds> kWaitTerms = {
    StepTerm::kTensorParallel, StepTerm::kContextParallel, StepTerm::kZeroGather, StepTerm::kExpertAllToAll};
constexpr std::array<std::string_view, pipeline::kNumCommWaitKinds> kWaitRows = {
    "tp (waits in F/I/W)", "cp (waits in F/I/W)", "zero_gather (waits in F/I/W)", "expert_all_to_all (waits in F/I/W)"};

// The planner's terms whose time a kind of measured wait holds: its own, and for the expert all-to-all's (whose timer
// spans plan_dispatch) the count exchange too.
bool in_wait_row(std::size_t k, std::size_t t) {
  return static_cast<std::size_t>(kWaitTerms[k]) == t ||
         (kWaitTerms[k] == StepTerm::kExpertAllToAll && t == static_cast<std::size_t>(StepTerm::kCountExchange));
}

bool is_wait_term(std::size_t t) {
  for (std::size_t k = 0; k < kWaitTerms.size(); ++k) {
    if (in_wait_row(k, t)) return true;
  }
  return false;
}

}  // namespace

double MeasuredStep::total() const {
  double sum = point_to_point_s + bubble_s;
  for (double s : actions) sum += s;
  for (double s : comm_wait_s) sum += s;
  return sum;
}

bool MeasuredStep::has_comm_waits() const {
  return std::any_of(comm_wait_s.begin(), comm_wait_s.end(), [](double s) { return s > 0; });
}

pipeline::Timeline read_chrome_trace(std::string_view json_text, const std::string& what) {
  const auto trace = nlohmann::json::parse(json_text, nullptr, false);
  CLEAVE_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
               "{}: not a Chrome trace (no \"traceEvents\" array); expected the trace.json train.trace writes", what);
  pipeline::Timeline timeline;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", std::string()) != "X") continue;
    CLEAVE_CHECK(e.contains("pid") && e.contains("cat") && e.contains("ts") && e.contains("dur"),
                 "{}: a complete event (\"ph\": \"X\") without pid, cat, ts or dur: {}", what, e.dump());
    const int rank = e["pid"].get<int>();
    CLEAVE_CHECK(rank >= 0 && rank < 1 << 16, "{}: event pid {} is not a pp rank", what, rank);
    pipeline::TimedAction t;
    t.action.kind = kind_from_token(e["cat"].get<std::string>(), what);
    const auto args = e.value("args", nlohmann::json::object());
    t.action.stage = args.value("stage", -1);
    t.action.microbatch = args.value("microbatch", -1);
    t.start = e["ts"].get<double>() / 1e3;  // µs -> ms
    t.end = t.start + e["dur"].get<double>() / 1e3;
    for (std::size_t k = 0; k < t.comm_wait.size(); ++k) t.comm_wait[k] = args.value(pipeline::comm_wait_arg(k), 0.0) / 1e3;
    if (static_cast<std::size_t>(rank) >= timeline.ranks.size()) timeline.ranks.resize(static_cast<std::size_t>(rank) + 1);
    timeline.ranks[static_cast<std::size_t>(rank)].push_back(t);
  }
  return timeline;
}

MeasuredStep measure_step(const pipeline::Timeline& timeline, int rank) {
  CLEAVE_CHECK(rank >= 0 && rank < static_cast<int>(timeline.ranks.size()),
               "measured step: the timeline has {}, no rank {} (was the trace taken with the plan's pp?)",
               count_of(static_cast<std::int64_t>(timeline.ranks.size()), "pp rank"), rank);
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  std::map<Key, double> sends;  // every SEND's posting time, over all ranks (one clock: one node)
  for (const auto& r : timeline.ranks) {
    for (const auto& t : r) {
      t0 = std::min(t0, t.start), t1 = std::max(t1, t.end);
      if (pipeline::is_send(t.action.kind)) sends.emplace(key_of(t.action), t.start);
    }
  }
  MeasuredStep m;
  m.rank = rank;
  if (!(t1 >= t0)) return m;
  std::vector<pipeline::TimedAction> spans = timeline.ranks[static_cast<std::size_t>(rank)];
  std::stable_sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  std::set<Key> recvs;
  for (const auto& t : spans) {
    if (pipeline::is_recv(t.action.kind)) recvs.insert(key_of(t.action));
  }
  double p2p = 0, bubble = 0;
  std::array<double, kNumStepActions> busy{};
  std::array<double, pipeline::kNumCommWaitKinds> waits{};
  // Idle from `from` to `to` before `next`: until the peer posted the tensor `next` waits for it is bubble, after
  // that point-to-point; idle before a local action is bubble.
  const auto idle = [&](double from, double to, const pipeline::Action& next) {
    Key send;
    const auto posted = needed_send(next, recvs, send) ? sends.find(send) : sends.end();
    if (posted == sends.end()) {
      bubble += to - from;
      return;
    }
    const double arrived_from = std::clamp(posted->second, from, to);
    bubble += arrived_from - from;
    p2p += to - arrived_from;
  };
  double cursor = t0;
  for (const auto& t : spans) {
    if (t.start > cursor) idle(cursor, t.start, t.action);
    const double own = std::max(0.0, t.end - std::max(t.start, cursor));  // overlapping spans count once
    if (pipeline::is_communication(t.action.kind)) {
      p2p += own;
    } else {
      // The span's waits on collectives, in the share of it not already counted (overlapping spans count once).
      const double share = t.end > t.start ? own / (t.end - t.start) : 0.0;
      double waited = 0;
      for (std::size_t k = 0; k < waits.size(); ++k) {
        const double w = std::clamp(t.comm_wait[k] * share, 0.0, std::max(0.0, own - waited));
        waits[k] += w;
        waited += w;
      }
      busy[static_cast<std::size_t>(action_row(t.action.kind))] += own - waited;
      m.fused_backward = m.fused_backward || t.action.kind == ActionKind::kBackward;
    }
    cursor = std::max(cursor, t.end);
  }
  bubble += std::max(0.0, t1 - cursor);
  for (std::size_t k = 0; k < busy.size(); ++k) m.actions[k] = busy[k] * 1e-3;  // ms -> s
  for (std::size_t k = 0; k < waits.size(); ++k) m.comm_wait_s[k] = waits[k] * 1e-3;
  m.point_to_point_s = p2p * 1e-3;
  m.bubble_s = bubble * 1e-3;
  m.step_s = (t1 - t0) * 1e-3;
  return m;
}

MeasuredStep median_step(const std::vector<MeasuredStep>& steps) {
  MeasuredStep m;
  if (steps.empty()) return m;
  m.rank = steps.front().rank;
  const auto field = [&](auto get) {
    std::vector<double> v;
    for (const auto& s : steps) v.push_back(get(s));
    return median(v);
  };
  for (std::size_t k = 0; k < m.actions.size(); ++k) m.actions[k] = field([k](const MeasuredStep& s) { return s.actions[k]; });
  for (std::size_t k = 0; k < m.comm_wait_s.size(); ++k) {
    m.comm_wait_s[k] = field([k](const MeasuredStep& s) { return s.comm_wait_s[k]; });
  }
  m.point_to_point_s = field([](const MeasuredStep& s) { return s.point_to_point_s; });
  m.bubble_s = field([](const MeasuredStep& s) { return s.bubble_s; });
  m.step_s = field([](const MeasuredStep& s) { return s.step_s; });
  for (const auto& s : steps) m.fused_backward = m.fused_backward || s.fused_backward;
  return m;
}

std::vector<TermRow> compare_step(const StepBreakdown& predicted, const MeasuredStep& measured) {
  std::vector<TermRow> rows;
  // With measured waits the collectives' terms in F, I and W leave those rows for rows of their own.
  const bool split = measured.has_comm_waits();
  TermSeconds split_off{};
  const auto term_list = [](const TermSeconds& terms, TermRow& row) {
    for (std::size_t t = 0; t < terms.size(); ++t) {
      row.predicted_s += terms[t];
      if (terms[t] < 5e-7) continue;  // under 0.0005 ms: not worth a word
      row.predicted_terms += fmt::format("{}{} {:.3f}", row.predicted_terms.empty() ? "" : " + ",
                                         step_term_info(static_cast<StepTerm>(t)).name, terms[t] * 1e3);
    }
  };
  // A row of the kinds of action `kinds`: the planner's terms in them, and their measured spans.
  const auto spans_row = [&](std::string name, std::initializer_list<StepAction> kinds) {
    TermSeconds terms{};
    TermRow row{std::move(name), "", 0, 0};
    for (StepAction k : kinds) {
      const bool compute = k == StepAction::kForward || k == StepAction::kInputGrad || k == StepAction::kWeightGrad;
      for (std::size_t t = 0; t < terms.size(); ++t) {
        const double s = predicted.by_action[static_cast<std::size_t>(k)][t];
        (split && compute && is_wait_term(t) ? split_off[t] : terms[t]) += s;
      }
      row.measured_s += measured[k];
    }
    term_list(terms, row);
    rows.push_back(std::move(row));
  };
  // An idle row, named after its first term: the planner's terms in it (a term other than the first only when not 0).
  const auto idle_row = [&](std::initializer_list<StepTerm> terms, double measured_s) {
    const std::string name(step_term_info(*terms.begin()).name);
    TermRow row{name, "", 0, measured_s};
    for (StepTerm term : terms) {
      if (term != *terms.begin() && predicted[term] == 0) continue;
      row.predicted_s += predicted[term];
      row.predicted_terms += fmt::format("{}{} {:.3f}", row.predicted_terms.empty() ? "" : " + ",
                                         step_term_info(term).name, predicted[term] * 1e3);
    }
    rows.push_back(std::move(row));
  };
  using A = StepAction;
  spans_row("forward (F)", {A::kForward});
  if (measured.fused_backward) {
    spans_row("backward (B = I + W)", {A::kInputGrad, A::kWeightGrad});
  } else {
    spans_row("input_grad (I)", {A::kInputGrad});
    spans_row("weight_grad (W)", {A::kWeightGrad});
  }
  spans_row("data_parallel (REDUCE_GRAD)", {A::kReduceGrad});
  spans_row("optimizer (OPTIMIZER_STEP)", {A::kOptimizer});
  for (std::size_t k = 0; split && k < kWaitTerms.size(); ++k) {
    TermSeconds terms{};
    for (std::size_t t = 0; t < terms.size(); ++t) terms[t] = in_wait_row(k, t) ? split_off[t] : 0.0;
    TermRow row{std::string(kWaitRows[k]), "", 0, measured.comm_wait_s[k]};
    term_list(terms, row);
    rows.push_back(std::move(row));
  }
  idle_row({StepTerm::kPointToPoint, StepTerm::kPointToPointWait}, measured.point_to_point_s);
  idle_row({StepTerm::kBubble}, measured.bubble_s);
  // Rows under 0.0005 ms both predicted and measured (a REDUCE_GRAD with one replica) say nothing.
  std::erase_if(rows, [](const TermRow& r) { return r.predicted_s < 5e-7 && r.measured_s < 5e-7; });
  rows.push_back({"total", "the predicted step", predicted.total(), measured.step_s});
  return rows;
}

const TermRow* largest_disagreement(const std::vector<TermRow>& rows) {
  const TermRow* worst = nullptr;
  for (const auto& r : rows) {
    if (r.name == "total") continue;
    if (!worst || std::abs(r.predicted_s - r.measured_s) > std::abs(worst->predicted_s - worst->measured_s)) worst = &r;
  }
  return worst;
}

std::vector<std::string> comparison_table(const std::vector<TermRow>& rows) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("  {:<34} {:>12} {:>12} {:>9}  {}", "row (measured spans)", "predicted ms", "measured ms",
                              "pred/meas", "the planner's terms in the row (ms)"));
  for (const auto& r : rows) {
    lines.push_back(fmt::format("  {:<34} {:>12.3f} {:>12.3f} {:>9}  {}", r.name, r.predicted_s * 1e3,
                                r.measured_s * 1e3, ratio_text(r.predicted_s, r.measured_s),
                                r.predicted_terms.empty() ? "-" : r.predicted_terms));
  }
  if (const TermRow* w = largest_disagreement(rows)) {
    lines.push_back(fmt::format("  largest disagreement: {} ({}): predicted {:.3f} ms, measured {:.3f} ms ({:+.3f} ms, "
                                "pred/meas {})", w->name, w->predicted_terms.empty() ? "no term predicted" : w->predicted_terms,
                                w->predicted_s * 1e3, w->measured_s * 1e3, (w->predicted_s - w->measured_s) * 1e3,
                                ratio_text(w->predicted_s, w->measured_s)));
  }
  return lines;
}

}  // namespace cleave::planner
