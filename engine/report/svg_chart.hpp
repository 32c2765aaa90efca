// SVG charts for the run report (report.html): plain inline SVG strings, no scripts, no external assets.
//
// Invariants:
//  - Every series' <polyline> carries data-series="<name>" and data-points="<n>", and its points attribute
//    holds exactly n "x,y" pairs: one per finite (x, y) sample, in order (non-finite samples are skipped, not
//    drawn at zero). Tests count them.
//  - Output is deterministic (fixed number formatting), so a regenerated report is byte-identical.
//  - Text is XML-escaped; nothing here reads files or knows about runs.
// Extending: a new chart kind is one more function returning a complete <svg> element.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cleave::report {

struct Series {
  std::string name;   // legend text and data-series attribute
  std::string color;  // CSS colour, e.g. "#1f77b4"
  std::vector<double> x;
  std::vector<double> y;  // same length as x
  bool markers = false;   // draw a dot at each point (sparse series such as eval loss)
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  std::vector<double> x_markers;  // dashed vertical lines at these x (e.g. the steps a run resumed at)
  std::string x_marker_label;     // text beside each marker ("resumed")
  int width = 640;
  int height = 260;
};

// One <svg> element: axes with round-number ticks, one polyline per series, a legend. A chart with no finite
// point renders a "no data" note instead of axes.
std::string line_chart_svg(const LineChart& chart);

// A stacked horizontal bar per rank (one segment per category) with an optional cap line.
struct StackedBars {
  std::string title;
  std::vector<std::string> bar_labels;       // "rank 0 (pp 0, dp 0, tp 0)"
  std::vector<std::string> segment_names;    // categories, in stacking order
  std::vector<std::string> segment_colors;   // one per segment name
  std::vector<std::vector<double>> values;   // [bar][segment], bytes
  std::vector<double> markers;               // optional per-bar marker (e.g. total peak); empty = none
  std::string marker_name;                   // legend text of the markers
  double cap = 0;                            // 0 = no cap line
  int width = 640;
};

std::string stacked_bars_svg(const StackedBars& chart);

// Round tick values covering [lo, hi] (1, 2, 5 x 10^k steps), about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// Compact tick / value text: "0.001", "2.5k", "1.2M", "3e-05".
std::string format_number(double value);
// format_number for a set of ticks, with more significant digits where needed so no two labels are equal
// ("20.48M", "20.49M" rather than "20.5M" twice).
std::vector<std::string> tick_labels(const std::vector<double>& ticks);
// &, <, >, " escaped for XML text and attributes.
std::string xml_escape(std::string_view text);

}  // namespace cleave::report
