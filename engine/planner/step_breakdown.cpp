// See step_breakdown.hpp.
#include "engine/planner/step_breakdown.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cleave::planner {
namespace {

constexpr std::array<StepTermInfo, kNumStepTerms> kStepTermInfo = {{
    {"forward", "F compute"},
    {"input_grad", "I compute (input gradients)"},
    {"weight_grad", "W compute (weight gradients)"},
    {"recompute", "forward rerun inside I (train.recompute)"},
    {"elementwise", "memory-bound elementwise / norm / softmax traffic (roofline)"},
    {"kernel_launch", "kernel launches x launch cost (roofline)"},
    {"tensor_parallel", "tp all-reduces / SP reduce-scatter + all-gather, boundary all-gathers"},
    {"context_parallel", "cp key/value exchange not hidden by compute"},
    {"expert_all_to_all", "ep all-to-alls: dispatch, combine and their gradients"},
    {"count_exchange", "ep count exchange before each dispatch, and its meeting's wait"},
    {"zero_gather", "ZeRO parameter all-gathers not hidden by prefetch"},
    {"data_parallel", "gradient reduction over the dp x cp replicas"},
    {"optimizer", "optimizer step"},
    {"point_to_point", "idle: pipeline boundary transfers (P2P)"},
    {"point_to_point_wait", "idle: P2P receivers waiting for the time their senders lost, or for their core's holder"},
    {"bubble", "idle: pipeline bubble"},
}};

}  // namespace

const StepTermInfo& step_term_info(StepTerm term) { return kStepTermInfo[static_cast<std::size_t>(term)]; }

double ActionTerms::total() const {
  double sum = 0;
  for (double s : exposed) sum += s;
  return sum;
}

void add_block_seconds(std::vector<BlockPassSeconds>& into, const BlockPassSeconds& b) {
  auto it = std::find_if(into.begin(), into.end(), [&](const BlockPassSeconds& k) { return k.block == b.block; });
  if (it == into.end()) {
    into.push_back({b.block, 0, 0, 0, 0, 0, {}, {}});
    it = into.end() - 1;
  }
  it->forward_s += b.forward_s;
  it->input_grad_s += b.input_grad_s;
  it->weight_grad_s += b.weight_grad_s;
  it->recompute_s += b.recompute_s;
  for (std::size_t p = 0; p < b.elementwise_s.size(); ++p) {
    it->elementwise_s[p] += b.elementwise_s[p];
    it->launch_s[p] += b.launch_s[p];
  }
}

ActionTerms& ActionTerms::operator+=(const ActionTerms& o) {
  for (int t = 0; t < kNumStepTerms; ++t) {
    exposed[static_cast<std::size_t>(t)] += o.exposed[static_cast<std::size_t>(t)];
    hidden[static_cast<std::size_t>(t)] += o.hidden[static_cast<std::size_t>(t)];
  }
  return *this;
}

double StepBreakdown::total() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

void StepBreakdown::add_action(StepAction kind, const ActionTerms& terms) {
  TermSeconds& into = by_action[static_cast<std::size_t>(kind)];
  for (std::size_t t = 0; t < into.size(); ++t) into[t] += terms.exposed[t];
}

void StepBreakdown::set_groups() {
  using T = StepTerm;
  const auto& b = *this;
  compute_s = b[T::kForward] + b[T::kInputGrad] + b[T::kWeightGrad] + b[T::kRecompute] + b[T::kElementwise] +
              b[T::kKernelLaunch];
  tp_comm_s = b[T::kTensorParallel] + b[T::kContextParallel] + b[T::kExpertAllToAll] + b[T::kCountExchange];
  idle_s = b[T::kPointToPoint] + b[T::kPointToPointWait] + b[T::kBubble];
  dp_comm_s = b[T::kZeroGather] + b[T::kDataParallel];
  optimizer_s = b[T::kOptimizer];
}

std::vector<std::string> breakdown_table(const StepBreakdown& b, bool all) {
  std::vector<std::string> lines;
  const double total = b.total();
  const auto percent = [&](double s) { return total > 0 ? 100 * s / total : 0.0; };
  const auto row = [&](std::string_view name, double s, std::string_view what, double hidden) {
    std::string line = fmt::format("  {:<24} {:>10.3f} {:>6.1f}%  {:<68}", name, s * 1e3, percent(s), what);
    if (hidden > 0) line += fmt::format(" {:.3f}", hidden * 1e3);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line;
  };
  lines.push_back(fmt::format("  {:<24} {:>10} {:>7}  {:<68} {}", "term", "ms/step", "share", "what",
                              "hidden ms (overlapped, not in the sum)"));
  for (int t = 0; t < kNumStepTerms; ++t) {
    const auto term = static_cast<StepTerm>(t);
    const double s = b.seconds[static_cast<std::size_t>(t)], h = b.hidden[static_cast<std::size_t>(t)];
    if (!all && s == 0 && h == 0) continue;
    const StepTermInfo& info = step_term_info(term);
    lines.push_back(row(info.name, s, info.description, h));
    for (const BlockPassSeconds& k : b.blocks) {  // compute per block kind under its pass
      const double pass = term == StepTerm::kForward     ? k.forward_s
                          : term == StepTerm::kInputGrad  ? k.input_grad_s
                          : term == StepTerm::kWeightGrad ? k.weight_grad_s
                          : term == StepTerm::kRecompute  ? k.recompute_s
                          : term == StepTerm::kElementwise ? k.elementwise_total()
                          : term == StepTerm::kKernelLaunch ? k.launch_total()
                                                          : 0.0;
      if (pass > 0) lines.push_back(row(fmt::format("  {}", k.block), pass, fmt::format("{} on the rank", k.blocks), 0));
    }
  }
  lines.push_back(row("total", total, fmt::format("the predicted step (pp rank {}, the busiest)", b.rank), 0));
  return lines;
}

}  // namespace cleave::planner
