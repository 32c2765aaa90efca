// The profile's load record: its judgement (pure, on recorded figures) and its file form (partition/load_check.hpp).
#include "partition/load_check.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::partition {

using nlohmann::json;

namespace {

// The control speed's movement over the profile and the worst spread within one control, as fractions.
void judge_controls(const std::vector<LoadCheck::Control>& controls, LoadVerdict& v) {
  if (controls.empty()) return;
  double fastest = controls.front().median_s, slowest = fastest;
  for (const auto& c : controls) {
    fastest = std::min(fastest, c.median_s);
    slowest = std::max(slowest, c.median_s);
    v.spread = std::max(v.spread, c.median_s / c.min_s - 1);
  }
  v.drift = slowest / fastest - 1;
}

void add_reason(std::string& what, const std::string& reason) { what += (what.empty() ? "" : "; ") + reason; }

}  // namespace

LoadVerdict judge_load(const LoadCheck& check) {
  LoadVerdict v;
  judge_controls(check.controls, v);
  const double cores = std::max(1, check.cores);
  if (check.loadavg_start >= 0) v.others_start = check.loadavg_start / cores;
  if (check.loadavg_end >= 0) {
    // The 1-minute average moves toward the profile's own threads as 1 - exp(-t / 60 s).
    const double own = check.own_threads * (1 - std::exp(-check.seconds / 60.0));
    v.others_end = std::max(0.0, check.loadavg_end - own) / cores;
  }
  if (v.drift > kDriftLimit) {
    const auto [lo, hi] = std::minmax_element(check.controls.begin(), check.controls.end(),
                                              [](const auto& a, const auto& b) { return a.median_s < b.median_s; });
    add_reason(v.what, fmt::format("the control compute's speed moved {:.0f}% during it ({:.2f} ms at {}, {:.2f} ms "
                                   "at {}; a quiet machine moves it under {:.0f}%)",
                                   v.drift * 100, lo->median_s * 1e3, lo->at, hi->median_s * 1e3, hi->at,
                                   kDriftLimit * 100));
  }
  if (v.spread > kSpreadLimit) {
    add_reason(v.what, fmt::format("one control's runs spread {:.0f}% (median over fastest; quiet: under {:.0f}%)",
                                   v.spread * 100, kSpreadLimit * 100));
  }
  // The load average lags by a minute (a build that ended as the profile began still counts), so alone it flags
  // nothing: it flags a control that moved by more than a third of its limit while others kept the cores busy.
  if (std::max(v.others_start, v.others_end) > kOthersPerCore && v.drift > kDriftLimit / 3) {
    add_reason(v.what, fmt::format("other work kept the cores busy: load average {:.2f} at the start and {:.2f} at "
                                   "the end on {} cores ({:.2f} and {:.2f} per core besides the profile's own {} "
                                   "threads; quiet: under {:.1f})",
                                   check.loadavg_start, check.loadavg_end, check.cores, v.others_start, v.others_end,
                                   check.own_threads, kOthersPerCore));
  }
  v.disturbed = !v.what.empty();
  return v;
}

std::optional<std::string> load_warning(const std::optional<LoadCheck>& check, const std::string& profile_name) {
  if (!check) return std::nullopt;
  const LoadVerdict v = judge_load(*check);
  if (!v.disturbed) return std::nullopt;
  return fmt::format("profile '{}' was measured on a loaded machine ({}): its times may be up to 2x slow; re-run "
                     "`cleave profile` on a quiet machine or with fewer ranks",
                     profile_name, v.what);
}

json load_check_to_json(const LoadCheck& check) {
  json controls = json::array();
  for (const auto& c : check.controls) {
    controls.push_back({{"at", c.at}, {"median_ms", file_number(c.median_s * 1e3)},
                        {"min_ms", file_number(c.min_s * 1e3)}});
  }
  return {{"control", "probe GEMM 128^3 f32 x 512, every rank at once; 7 runs: median and fastest (rank 0)"},
          {"controls", controls},
          {"loadavg_start", check.loadavg_start},
          {"loadavg_end", check.loadavg_end},
          {"cores", check.cores},
          {"own_threads", check.own_threads},
          {"seconds", file_number(check.seconds)}};
}

namespace {

double finite_at_least(const json& node, const std::string& key, double least, const std::string& where) {
  CLEAVE_CHECK(node.contains(key) && node.at(key).is_number(), "{}: missing number '{}'", where, key);
  const double v = node.at(key).get<double>();
  CLEAVE_CHECK(std::isfinite(v) && v >= least, "{}: '{}' must be a number >= {}, got {}", where, key, least, v);
  return v;
}

}  // namespace

LoadCheck load_check_from_json(const json& node, const std::string& where) {
  CLEAVE_CHECK(node.is_object(), "{}: expected an object", where);
  LoadCheck c;
  CLEAVE_CHECK(node.contains("controls") && node.at("controls").is_array(), "{}: 'controls' must be an array", where);
  for (std::size_t i = 0; i < node.at("controls").size(); ++i) {
    const json& x = node.at("controls")[i];
    const std::string at = fmt::format("{}.controls[{}]", where, i);
    CLEAVE_CHECK(x.is_object() && x.contains("at") && x.at("at").is_string(), "{}: needs a string 'at'", at);
    LoadCheck::Control control{x.at("at").get<std::string>(), finite_at_least(x, "median_ms", 0, at) * 1e-3,
                               finite_at_least(x, "min_ms", 0, at) * 1e-3};
    CLEAVE_CHECK(control.min_s > 0 && control.min_s <= control.median_s,
                 "{}: needs 0 < min_ms <= median_ms, got {} and {}", at, control.min_s * 1e3, control.median_s * 1e3);
    c.controls.push_back(control);
  }
  c.loadavg_start = finite_at_least(node, "loadavg_start", -1, where);
  c.loadavg_end = finite_at_least(node, "loadavg_end", -1, where);
  c.cores = static_cast<int>(finite_at_least(node, "cores", 1, where));
  c.own_threads = static_cast<int>(finite_at_least(node, "own_threads", 0, where));
  c.seconds = finite_at_least(node, "seconds", 0, where);
  return c;
}

}  // namespace cleave::partition
