// verify's report: the text `cleave verify` prints from a VerifyReport (the loss and tensor tables, each floor's
// lines, the routing verdict, the hints). Invariant: formatting only; every verdict and bound is decided in
// verify.cpp and the floors' files, so what is printed is what was checked.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/train/verify.hpp"

namespace cleave::train {
namespace {

// The null-gradient slices' lines (none under SGD): why they are not in the table, and their bound.
std::string format_null_slices(const std::vector<NullSliceDifference>& slices, std::size_t max_rows) {
  if (slices.empty()) return "";
  std::string out = fmt::format(
      "\nheld to AdamW's bound instead (gradient zero in exact arithmetic: AdamW turns its rounding noise into steps "
      "up to lr; any two AdamW runs differ there by at most 2 x sum of lr x Adam's step bound, {:.3g}):\n",
      slices.front().bound);
  auto sorted = slices;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const NullSliceDifference& a, const NullSliceDifference& b) { return a.max_abs > b.max_abs; });
  for (std::size_t i = 0; i < sorted.size() && i < max_rows; ++i) {
    const NullSliceDifference& d = sorted[i];
    out += fmt::format("{:<40} [{}, {}) max |diff| {:.3g}: {} ({})\n", d.slice.param, d.slice.begin, d.slice.end,
                       d.max_abs, d.within() ? "within" : "BEYOND the bound", d.slice.reason);
  }
  if (sorted.size() > max_rows) out += fmt::format("... {} more slices\n", sorted.size() - max_rows);
  return out;
}

// How close a tensor is to failing: its difference over the tolerance it is held to (tensor_within's rule).
double closeness(const ParamDifference& d, const VerifyOptions& options, const VerifyReport& report) {
  double c = d.normalised / std::max(options.param_tolerance, 1e-300);
  if (report.floor) c = std::min(c, d.moved / std::max(report.floor->tolerance(), 1e-300));
  if (report.rounding) c = std::min(c, d.max_abs / std::max(report.rounding->tolerance(d.name), 1e-300));
  auto e = report.element_checks.find(d.name);
  if (e != report.element_checks.end()) c = std::min(c, e->second.ratio);
  return c;
}

// The precision twin's lines: what it is, the factor, the tensor closest to its tolerance.
std::string format_rounding(const RoundingFloor& r, const std::vector<ParamDifference>& params) {
  // A tensor the fp32 run ends exactly on the reference has no finite ratio: name it with its difference instead of
  // dividing by zero (which printed 1e+297 x).
  double worst = 0, unbounded = 0;
  std::string name = "-", unbounded_name;
  for (const ParamDifference& d : params) {
    const double twin = r.max_abs.count(d.name) ? r.max_abs.at(d.name) : 0.0;
    if (d.max_abs <= 0) continue;
    if (twin <= 0) {
      if (d.max_abs > unbounded) unbounded = d.max_abs, unbounded_name = d.name;
    } else if (d.max_abs / twin > worst) {
      worst = d.max_abs / twin, name = d.name;
    }
  }
  const std::string largest =
      unbounded_name.empty()
          ? fmt::format("{:.3g} x ({})", worst, name)
          : fmt::format("unbounded ({} ends {:.3g} from the reference, where the {} ends on it exactly)",
                        unbounded_name, unbounded, r.order ? "order twins" : "fp32 run");
  if (r.order) {
    return fmt::format(
        "fp32 AdamW order floor per tensor: the reference run again with {} (the same sums in another order; "
        "AdamW turns the rounding of a near-zero gradient into a step up to lr) ends each tensor this far from it "
        "(\"vs order twin\", the largest over every pair among the reference and the twins); a tensor also passes "
        "within {:.3g} x that (--noise-multiple x sqrt((tp + 2) / 2) at tp > 1): the layout's largest is {}; the "
        "twins' losses differ by up to {:.3g}\n",
        r.twin, r.factor, largest, r.loss);
  }
  return fmt::format(
      "bf16 rounding per tensor: the reference run again with {} ends each tensor as far from it as bf16's roundings "
      "move it (\"vs fp32\"); a tensor also passes within {:.3g} x that (--noise-multiple x sqrt((tp + 2) / 2) at tp > "
      "1): the layout's largest is {}; the fp32 run's losses differ by up to {:.3g}\n",
      r.twin, r.factor, largest, r.loss);
}

// The twins' lines: what they are, each pair's largest, the floor, the tolerance a tensor gets from it.
std::string format_floor(const NoiseFloor& f, const std::vector<ParamDifference>& params) {
  const auto worst = std::max_element(params.begin(), params.end(), [](const ParamDifference& a,
                                                                       const ParamDifference& b) { return a.moved < b.moved; });
  std::string twins;
  for (std::size_t k = 0; k < f.twins.size(); ++k) {
    twins += fmt::format("{}{} (twin {})", k == 0 ? "" : k + 1 == f.twins.size() ? " and with " : ", with ", f.twins[k],
                         k + 1);
  }
  std::string pairs;
  for (const FloorPair& p : f.pairs) {
    pairs += fmt::format("{}{} {:.3g} ({})", pairs.empty() ? "" : ", ", p.runs, p.largest,
                         p.worst.empty() ? "-" : p.worst);
  }
  return fmt::format(
      "\nbf16 noise floor: the reference run again with {} (the same sums in other orders before the same bf16 "
      "roundings); the runs of each pair end apart by at most these fractions of a tensor's movement: {}; the floor is "
      "their largest, {:.3g}{}; a tensor passes within --param-tolerance of its scale or within {:g} x {:.3g} x that "
      "(--noise-multiple x sqrt((tp + 2) / 2) at tp > 1), {:.3g}, of its movement: the layout's largest is {:.3g} "
      "({}); the twins' losses differ by up to {:.3g}\n",
      twins, pairs, f.floor,
      f.flip > 0 ? fmt::format(", and no less than one sign flip of AdamW's first update (2 lr_1 / sum of lr), {:.3g}",
                               f.flip)
                 : std::string(),
      f.multiple, f.tp_factor, f.tolerance(), worst == params.end() ? 0.0 : worst->moved,
      worst == params.end() ? "-" : worst->name, f.loss);
}

// Why a run whose routing diverged is not compared further, and what checks it.
std::string format_routing(const RoutingDivergence& d) {
  const std::string counts = fmt::format("tokens per expert, summed over the blocks: layout {}, reference {}",
                                         fmt::join(d.layout, " "), fmt::join(d.reference, " "));
  if (d.near_tie()) {
    return fmt::format(
        "routing diverged at step {} on a near-tie: {} token(s) went to another expert than one rank sent them to "
        "({}). A router's choice is discrete: the layout's roundings moved a score across a near-tie, which no bound "
        "on rounding covers; from there the two runs train different experts on different tokens (and a sigmoid "
        "router's bias moves by its sign rule), so the differences above are not a mismatch of the layout's "
        "arithmetic, nor proof of it. Verdict: not shown either way; check the arithmetic with the routing fixed "
        "(model.forced_routing uniform keeps every router score, loss and sum, and chooses the experts by a fixed "
        "rule), as the command below does\n",
        d.step, d.moved, counts);
  }
  return fmt::format(
      "routing diverged at step {}: {} tokens went to other experts than one rank sent them to ({}), more than a "
      "near-tie tips ({} at most): a routing error (the router's scores or bias, the dispatch), or an error elsewhere "
      "that moved the scores first; the run with the routing fixed (the command below) checks the rest of the "
      "arithmetic\n",
      d.step, d.moved, counts, RoutingDivergence::kNearTieTokens);
}

// bf16 AdamW's loss floor line: what it is, the step closest to its bound.
std::string format_loss_floor(const VerifyReport& report, const VerifyOptions& options) {
  const std::vector<double> d = loss_differences(report.layout_losses, report.reference_losses);
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double floor = i < report.loss_floor.size() ? report.loss_floor[i] * report.loss_floor_factor : 0.0;
    const double ratio = d[i] / std::max({options.loss_tolerance, floor, 1e-300});
    if (!(ratio <= worst)) worst = ratio, at = i;
  }
  return fmt::format(
      "bf16 AdamW loss floor: after a step AdamW's normalised update turns bf16's roundings of near-zero gradients "
      "into lr-sized steps, and the loss follows the weights: a step's loss (from step 2) also passes within {:.3g} x "
      "the largest relative difference of the twins' and the fp32 run's loss from the reference's at that step "
      "(--noise-multiple x sqrt((tp + 2) / 2)); the closest is step {} at {:.3g} of its bound ({:.3g} against the "
      "twins' {:.3g})\n",
      report.loss_floor_factor, at + 1, worst, at < d.size() ? d[at] : 0.0,
      at < report.loss_floor.size() ? report.loss_floor[at] : 0.0);
}

// The per-element bound's line: what it is, how many tensors pass on it alone, the tensor closest to it.
std::string format_element(const VerifyReport& report, const VerifyOptions& options) {
  const ElementCheck* closest = nullptr;
  std::vector<std::string> only;  // the tensors that pass on this bound alone, with their ratio
  for (const ParamDifference& d : report.params) {
    auto e = report.element_checks.find(d.name);
    if (e == report.element_checks.end()) continue;
    const RoundingFloor* rounding = report.rounding ? &*report.rounding : nullptr;
    if (!tensor_within(d, options.param_tolerance, nullptr, rounding) && e->second.within()) {
      only.push_back(fmt::format("{} ({:.3g} of its bound)", d.name, e->second.ratio));
    }
    if (closest == nullptr || !(e->second.ratio <= closest->ratio)) closest = &e->second;
  }
  const ElementBound& b = *report.element_bound;
  return fmt::format(
      "fp32 AdamW per element: the order twins' differences show each tensor's gradient-order noise s, and the "
      "reference's own AdamW state how far such noise moves each element, s x sum over steps of lr (1 + B sqrt(t)) / "
      "(sqrt(v) + eps) (a near-zero gradient: up to a step per step; a large one: s / |g| of one); an element also "
      "passes within {:.3g} x that, at most {:.3g} (2 x sum of lr x Adam's step bound): {} tensor(s) pass on this "
      "alone{}; the closest is {}\n",
      b.factor, b.cap, only.size(),
      only.empty() ? std::string() : fmt::format(", {}", fmt::join(only.begin(), only.begin() + std::min<std::size_t>(only.size(), 4), ", ")),
      closest == nullptr ? std::string("-")
                         : fmt::format("{} at {:.3g} of its bound (element {}: {:.3g} against {:.3g})", closest->name,
                                       closest->ratio, closest->worst, closest->difference, closest->allowed));
}

}  // namespace

std::string format_report(const VerifyReport& report, const VerifyOptions& options, std::size_t max_rows) {
  std::string out = fmt::format("{:>5}  {:>14}  {:>14}  {:>10}\n", "step", "layout loss", "reference", "rel diff");
  for (std::size_t i = 0; i < report.layout_losses.size() && i < report.reference_losses.size(); ++i) {
    const double a = report.layout_losses[i], b = report.reference_losses[i];
    out += fmt::format("{:>5}  {:>14.8f}  {:>14.8f}  {:>10.3g}\n", i + 1, a, b, std::abs(a - b) / std::abs(b));
  }
  auto params = report.params;
  std::stable_sort(params.begin(), params.end(), [&](const ParamDifference& a, const ParamDifference& b) {
    return closeness(a, options, report) > closeness(b, options, report);
  });
  out += fmt::format("\n{:<40} {:>10} {:>12} {:>12}{}{}{}\n", "parameter (worst first)", "elements", "max |diff|",
                     "normalised", report.floor ? fmt::format(" {:>12}", "of movement") : "",
                     report.rounding ? fmt::format(" {:>12}", report.rounding->order ? "vs order twin" : "vs fp32")
                                     : "",
                     report.element_bound ? fmt::format(" {:>12}", "of elem bound") : "");
  for (std::size_t i = 0; i < params.size() && i < max_rows; ++i) {
    const ParamDifference& d = params[i];
    const auto fp32 = report.rounding ? report.rounding->max_abs.find(d.name) : std::map<std::string, double>::const_iterator();
    const auto element = report.element_checks.find(d.name);
    out += fmt::format("{:<40} {:>10} {:>12.3g} {:>12.3g}{}{}{}\n", d.name, d.numel, d.max_abs, d.normalised,
                       report.floor ? fmt::format(" {:>12.3g}", d.moved) : "",
                       report.rounding ? fmt::format(" {:>12.3g}", fp32 == report.rounding->max_abs.end() ? 0.0 : fp32->second)
                                       : "",
                       element != report.element_checks.end() ? fmt::format(" {:>12.3g}", element->second.ratio) : "");
  }
  if (params.size() > max_rows) out += fmt::format("... {} more parameters\n", params.size() - max_rows);
  out += format_null_slices(report.null_slices, std::min<std::size_t>(max_rows, 4));
  if (report.floor) out += format_floor(*report.floor, report.params);
  if (report.rounding) out += (report.floor ? "" : "\n") + format_rounding(*report.rounding, report.params);
  if (report.element_bound) out += format_element(report, options);
  if (!report.loss_floor.empty()) out += format_loss_floor(report, options);
  out += fmt::format("\nmax loss difference {:.3g} (tolerance {:.3g}{}), max parameter difference {:.3g} (tolerance "
                     "{:.3g}{}): {}\n",
                     report.max_loss_difference, options.loss_tolerance,
                     report.loss_floor.empty() ? std::string() : std::string(", or the twins' at that step x ") +
                                                                     fmt::format("{:.3g}", report.loss_floor_factor),
                     report.max_param_difference,
                     options.param_tolerance,
                     (report.floor ? fmt::format(", or the bf16 floor's {:.3g} of movement", report.floor->tolerance())
                                   : std::string()) +
                         (report.rounding ? fmt::format(", or {:.3g} x vs {}", report.rounding->factor,
                                                     report.rounding->order ? "order twin" : "fp32")
                                         : std::string()) +
                         (report.element_bound ? std::string(", or AdamW's per-element bound") : std::string()),
                     report.passed                                              ? "PASS"
                     : report.routing_diverged && report.routing_diverged->near_tie() ? "FAIL (routing diverged on a near-tie: not a parameter mismatch)"
                     : report.routing_diverged                                    ? "FAIL (routing diverged)"
                                                                                  : "FAIL");
  if (!report.passed && report.routing_diverged) return out + format_routing(*report.routing_diverged);
  const bool only_params =
      (report.losses_within || report.max_loss_difference <= options.loss_tolerance) && !report.params_within;
  if (!report.passed && only_params && (report.floor || report.rounding)) {
    // A router's choice is discrete: a score the layout's roundings move across a near-tie sends a token to another
    // expert, which no reordering of the reference need do (benchmarks/verify/RESULTS-2026-12-01-h-layout-sweep.md).
    const std::string routed =
        report.routed && !report.routing_compared ? "; or a router near-tie that the layout's roundings tip, sending a token to another expert (and "
                        "moving a sigmoid router's selection bias by its sign rule): check that with --set "
                        "model.forced_routing=uniform, which fixes the experts and keeps the arithmetic"
                      : "";
    out += "the losses agree and some parameters do not, by more than the same run differs from itself with its sums in "
           "another order: not rounding (a wrong gradient or update on those tensors), unless the layout rounds more "
           "often than the reference" + routed + "; compare with --set " +
           (report.adamw ? "optimizer.type=sgd" : "device.precision=fp32") + " (docs/multi-rank.md)\n";
  } else if (!report.passed && only_params && report.adamw) {
    out += "the losses agree and some parameters do not: with AdamW a parameter whose gradient is near zero (a query "
           "bias in bf16, a rarely routed expert) turns rounding noise into lr-sized steps, so a correct layout can differ "
           "here; check the layout with --set optimizer.type=sgd (docs/multi-rank.md)\n";
  }
  return out;
}

}  // namespace cleave::train
