// Timeline export: Chrome trace JSON and SVG (layout described in trace.hpp).
#include "pipeline/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.hpp"
#include "layers/comm_wait.hpp"

namespace cleave::pipeline {
namespace {

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path);
  CLEAVE_CHECK(out.good(), "cannot open {} file '{}' for writing", what, path);
  out << text;
  out.close();
  CLEAVE_CHECK(out.good(), "failed writing {} file '{}'", what, path);
}

struct Rgb {
  int r, g, b;
};

Rgb kind_colour(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return {0x4c, 0x78, 0xa8};
    case ActionKind::kBackwardInput: return {0xe4, 0x5f, 0x0b};
    case ActionKind::kBackwardWeight: return {0x3d, 0x8b, 0x37};
    case ActionKind::kBackward: return {0x8e, 0x4f, 0x9e};
    case ActionKind::kReduceGrad: return {0x7f, 0x7f, 0x7f};
    case ActionKind::kOptimizerStep: return {0x33, 0x33, 0x33};
    default: return {0xbb, 0xbb, 0xbb};
  }
}

// Mixes towards white by `amount` in [0, 1].
std::string hex(Rgb c, double amount = 0.0) {
  auto mix = [&](int v) { return static_cast<int>(std::lround(v + (255 - v) * amount)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(c.r), mix(c.g), mix(c.b));
}

std::string escape_xml(std::string_view text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// 1, 2 or 5 times a power of ten, giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  if (span <= 0) return 1.0;
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= factor * magnitude) return factor * magnitude;
  }
  return 10.0 * magnitude;
}

std::string format_time(double t) { return fmt::format("{:.6g}", t); }

}  // namespace

std::string comm_wait_arg(std::size_t k) {
  return fmt::format("wait_{}_us", layers::comm_kind_name(static_cast<layers::CommKind>(k)));
}

std::string trace_event_name(const Action& a) {
  if (!has_stage(a.kind)) return std::string(action_kind_token(a.kind));
  if (!has_microbatch(a.kind)) return fmt::format("{} s{}", action_kind_token(a.kind), a.stage);
  return fmt::format("{}{} s{}", action_kind_token(a.kind), a.microbatch, a.stage);
}

std::string chrome_trace_json(const Timeline& timeline, const TraceOptions& options) {
  using nlohmann::json;
  json events = json::array();
  for (int r = 0; r < static_cast<int>(timeline.ranks.size()); ++r) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", fmt::format("rank {}", r)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 1}, {"args", {{"name", "p2p"}}}});
    for (const auto& t : timeline.ranks[r]) {
      json args = json::object();
      if (has_stage(t.action.kind)) args["stage"] = t.action.stage;
      if (has_microbatch(t.action.kind)) args["microbatch"] = t.action.microbatch;
      for (std::size_t k = 0; k < t.comm_wait.size(); ++k) {  // a measured span's waits on collectives, µs
        if (t.comm_wait[k] > 0) args[comm_wait_arg(k)] = t.comm_wait[k] * options.microseconds_per_unit;
      }
      events.push_back({{"name", trace_event_name(t.action)},
                        {"cat", std::string(action_kind_token(t.action.kind))},
                        {"ph", "X"},
                        {"pid", r},
                        {"tid", is_communication(t.action.kind) ? 1 : 0},
                        {"ts", t.start * options.microseconds_per_unit},
                        {"dur", (t.end - t.start) * options.microseconds_per_unit},
                        {"args", args}});
    }
  }
  json trace = {{"traceEvents", events},
                {"displayTimeUnit", "ms"},
                {"otherData", {{"title", options.title}, {"time_unit", options.unit}}}};
  return trace.dump(1);
}

namespace {

// Where the SVG's parts go: the step's time span [t0, t0 + span] at px pixels per unit, rows of `row` px `gap` apart
// below `top`, `left` px kept for the rank labels, the time axis at axis_y.
struct SvgLayout {
  double t0 = 0, span = 0, px = 0;
  double left = 72, top = 76, row = 26, gap = 8, right = 24;
  double axis_y = 0;
};

// The layout for `timeline`; `kinds` collects the work kinds drawn (for the legend).
SvgLayout svg_layout(const Timeline& timeline, std::set<ActionKind>& kinds) {
  SvgLayout l;
  const int p = static_cast<int>(timeline.ranks.size());
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0, shortest = t0;
  for (const auto& rank : timeline.ranks) {
    for (const auto& t : rank) {
      t0 = std::min(t0, t.start);
      t1 = std::max(t1, t.end);
      if (!is_work(t.action.kind) || t.end <= t.start) continue;
      shortest = std::min(shortest, t.end - t.start);
      kinds.insert(t.action.kind);
    }
  }
  if (t0 > t1) t0 = t1 = 0.0;
  l.t0 = t0;
  l.span = std::max(t1 - t0, 1e-12);
  // About 22 px for the shortest box, kept between 640 and 2400 px for the whole step.
  double px = std::isfinite(shortest) ? 22.0 / shortest : 640.0 / l.span;
  l.px = std::clamp(px, 640.0 / l.span, 2400.0 / l.span);
  l.axis_y = l.top + p * (l.row + l.gap);
  return l;
}

// The legend: a swatch per kind drawn, then what shading and the numbers mean (`v` stages per rank).
std::string svg_legend(const std::set<ActionKind>& kinds, int v, double left) {
  struct LegendEntry {
    ActionKind kind;
    const char* label;
  };
  const LegendEntry legend[] = {{ActionKind::kForward, "F forward"},
                                {ActionKind::kBackwardInput, "I input grad"},
                                {ActionKind::kBackwardWeight, "W weight grad"},
                                {ActionKind::kBackward, "B backward (I+W)"},
                                {ActionKind::kReduceGrad, "R reduce grads"},
                                {ActionKind::kOptimizerStep, "O optimizer step"}};
  std::string svg;
  double lx = left;
  for (const auto& entry : legend) {
    if (!kinds.count(entry.kind)) continue;
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"48\" width=\"14\" height=\"12\" fill=\"{}\"/>", lx,
                       hex(kind_colour(entry.kind)));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"58\" font-size=\"11\">{}</text>\n", lx + 18, entry.label);
    lx += 18 + 7.0 * std::string_view(entry.label).size() + 14;
  }
  if (v > 1) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"58\" font-size=\"11\" fill=\"#444\">lighter = later chunk of the rank "
                       "({} stages per rank); number in box = micro-batch</text>\n",
                       lx, v);
  } else {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"58\" font-size=\"11\" fill=\"#444\">number in box = micro-batch</text>\n",
                       lx);
  }
  return svg;
}

// Rank r's row: its label, the background, and a box per work action (lighter for a later chunk of the rank), with
// the micro-batch (or R / O) inside where it fits.
std::string svg_rank_row(const Schedule& schedule, const std::vector<TimedAction>& actions, int r, const SvgLayout& l,
                         const TraceOptions& options) {
  const int v = std::max(1, schedule.virtual_stages);
  const double y = l.top + r * (l.row + l.gap);
  std::string svg = fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"end\">rank {}</text>\n",
                                l.left - 8, y + l.row / 2 + 4, r);
  svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"#f3f3f3\"/>\n", l.left, y,
                     l.span * l.px, l.row);
  for (const auto& t : actions) {
    if (!is_work(t.action.kind) || t.end <= t.start) continue;
    const int chunk = has_stage(t.action.kind) && t.action.stage >= 0 && t.action.stage < schedule.num_stages
                          ? schedule.chunk_of(t.action.stage)
                          : 0;
    const double shade = v > 1 ? 0.5 * chunk / (v - 1) : 0.0;
    const double x = l.left + (t.start - l.t0) * l.px, w = (t.end - t.start) * l.px;
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" stroke=\"#ffffff\" "
        "stroke-width=\"0.6\"><title>{} (rank {}): {}–{} {}</title></rect>",
        x, y, w, l.row, hex(kind_colour(t.action.kind), shade), escape_xml(trace_event_name(t.action)), r,
        format_time(t.start), format_time(t.end), escape_xml(options.unit));
    const std::string label = has_microbatch(t.action.kind)
                                  ? fmt::format("{}", t.action.microbatch)
                                  : fmt::format("{}", t.action.kind == ActionKind::kReduceGrad ? 'R' : 'O');
    const double font = std::min(11.0, w / (0.62 * label.size() + 0.4));
    if (font >= 6.0) {
      svg += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" text-anchor=\"middle\" fill=\"{}\">{}</text>", x + w / 2,
          y + l.row / 2 + font * 0.36, font, shade > 0.3 ? "#111111" : "#ffffff", label);
    }
    svg += '\n';
  }
  return svg;
}

// The time axis under the rows: ticks at 1, 2 or 5 times a power of ten, from the start of the step.
std::string svg_time_axis(const SvgLayout& l, const TraceOptions& options) {
  std::string svg = fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n", l.left,
                                l.axis_y, l.left + l.span * l.px, l.axis_y);
  const double step = tick_step(l.span, 10);
  for (double tick = 0.0; tick <= l.span + 1e-9 * l.span; tick += step) {
    const double x = l.left + tick * l.px;
    svg += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#333\"/>", x, l.axis_y, x,
                       l.axis_y + 5);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n", x,
                       l.axis_y + 17, format_time(tick));
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#444\">time ({}) "
                     "from the start of the step</text>\n",
                     l.left + l.span * l.px / 2, l.axis_y + 34, escape_xml(options.unit));
  return svg;
}

}  // namespace

std::string timeline_svg(const Schedule& schedule, const Timeline& timeline, const TraceOptions& options) {
  std::set<ActionKind> kinds;
  const SvgLayout l = svg_layout(timeline, kinds);
  const double width = l.left + l.span * l.px + l.right;
  const double height = l.axis_y + 44;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
      width, height, width, height);
  svg += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", l.left,
                     escape_xml(options.title));
  svg += fmt::format("<text x=\"{}\" y=\"38\" font-size=\"12\" fill=\"#444\">{}</text>\n", l.left,
                     escape_xml(options.subtitle));
  svg += svg_legend(kinds, std::max(1, schedule.virtual_stages), l.left);
  for (int r = 0; r < static_cast<int>(timeline.ranks.size()); ++r) {
    svg += svg_rank_row(schedule, timeline.ranks[r], r, l, options);
  }
  svg += svg_time_axis(l, options);
  svg += "</svg>\n";
  return svg;
}

void write_chrome_trace(const Timeline& timeline, const std::string& path, const TraceOptions& options) {
  write_file(path, chrome_trace_json(timeline, options), "trace");
}

void write_timeline_svg(const Schedule& schedule, const Timeline& timeline, const std::string& path,
                        const TraceOptions& options) {
  write_file(path, timeline_svg(schedule, timeline, options), "SVG");
}

}  // namespace cleave::pipeline
