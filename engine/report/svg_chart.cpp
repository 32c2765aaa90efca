// SVG line charts and stacked bars (svg_chart.hpp).
#include "engine/report/svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/allocator.hpp"

namespace cleave::report {
namespace {

constexpr int kLeft = 64;    // room for y tick labels
constexpr int kRight = 16;
constexpr int kTop = 28;     // title
constexpr int kBottom = 56;  // x ticks, x label, legend

// Pixel coordinates with one decimal: enough for a crisp line, small files, deterministic text.
std::string px(double v) { return fmt::format("{:.1f}", v); }

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// A flat range gets some height so its line sits mid-chart instead of on an axis.
Range padded(Range r) {
  if (r.empty()) return r;
  if (r.hi == r.lo) {
    const double pad = r.lo == 0 ? 1.0 : std::abs(r.lo) * 0.1;
    r.lo -= pad;
    r.hi += pad;
  }
  return r;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// format_number with `extra` more significant digits than its default.
std::string format_number_digits(double v, int extra) {
  if (!std::isfinite(v)) return "-";
  const double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e9) return fmt::format("{:.{}g}G", v / 1e9, 3 + extra);
  if (a >= 1e6) return fmt::format("{:.{}g}M", v / 1e6, 3 + extra);
  if (a >= 1e4) return fmt::format("{:.{}g}k", v / 1e3, 3 + extra);
  if (a >= 1e-3) return fmt::format("{:.{}g}", v, 4 + extra);
  return fmt::format("{:.{}g}", v, 2 + extra);
}

}  // namespace

std::string format_number(double v) { return format_number_digits(v, 0); }

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  std::vector<std::string> labels;
  for (int extra = 0; extra <= 12; ++extra) {
    labels.clear();
    for (double t : ticks) labels.push_back(format_number_digits(t, extra));
    std::vector<std::string> sorted = labels;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) break;
  }
  return labels;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  // Integer multiples of the step (no accumulated rounding), so 0.2 * 3 prints as 0.6.
  for (auto k = static_cast<std::int64_t>(std::ceil(lo / step)); k * step <= hi + step * 1e-9; ++k) {
    ticks.push_back(static_cast<double>(k) * step);
  }
  return ticks;
}

namespace {

// A line chart's plot area: the data ranges (padded) mapped onto the pixels inside the margins.
struct LinePlot {
  Range xr, yr;
  double plot_w = 0, plot_h = 0;
  double sx(double x) const { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * plot_w; }
  double sy(double y) const { return kTop + plot_h - (y - yr.lo) / (yr.hi - yr.lo) * plot_h; }
};

// The grid with tick labels on both axes, the x markers, and the axis labels. Tick labels carry as many digits as
// it takes to tell them apart (a flat series near 20.5M gets 20.48M, 20.49M, ..., never "20.5M" five times).
std::string line_axes_svg(const LineChart& chart, const LinePlot& plot) {
  const auto inside = [](std::vector<double> ticks, const Range& r) {
    std::erase_if(ticks, [&](double t) { return t < r.lo || t > r.hi; });
    return ticks;
  };
  std::string svg;
  const std::vector<double> y_ticks = inside(nice_ticks(plot.yr.lo, plot.yr.hi), plot.yr);
  const std::vector<std::string> y_labels = tick_labels(y_ticks);
  for (std::size_t i = 0; i < y_ticks.size(); ++i) {
    const double t = y_ticks[i];
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"grid\"/>", kLeft, px(plot.sy(t)),
                       px(kLeft + plot.plot_w), px(plot.sy(t)));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ytick\">{}</text>\n", kLeft - 6, px(plot.sy(t) + 4),
                       y_labels[i]);
  }
  const std::vector<double> x_ticks = inside(nice_ticks(plot.xr.lo, plot.xr.hi, 6), plot.xr);
  const std::vector<std::string> x_labels = tick_labels(x_ticks);
  for (std::size_t i = 0; i < x_ticks.size(); ++i) {
    const double t = x_ticks[i];
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"grid\"/>", px(plot.sx(t)), kTop,
                       px(plot.sx(t)), px(kTop + plot.plot_h));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xtick\">{}</text>\n", px(plot.sx(t)),
                       px(kTop + plot.plot_h + 16), x_labels[i]);
  }
  for (double x : chart.x_markers) {  // vertical markers (e.g. where the run resumed)
    if (!std::isfinite(x) || x < plot.xr.lo || x > plot.xr.hi) continue;
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"xmarker\" stroke=\"#d62728\" "
                       "stroke-dasharray=\"4 3\"/><text x=\"{3}\" y=\"{4}\" class=\"xmarkertext\">{5}</text>\n",
                       px(plot.sx(x)), kTop, px(kTop + plot.plot_h), px(plot.sx(x) + 3), kTop + 10,
                       xml_escape(chart.x_marker_label));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xlabel\">{}</text>\n", px(kLeft + plot.plot_w / 2),
                     px(kTop + plot.plot_h + 32), xml_escape(chart.x_label));
  svg += fmt::format("<text x=\"14\" y=\"{}\" class=\"ylabel\" transform=\"rotate(-90 14 {})\">{}</text>\n",
                     px(kTop + plot.plot_h / 2), px(kTop + plot.plot_h / 2), xml_escape(chart.y_label));
  return svg;
}

// One polyline per series over its finite points (dots too with markers), and its legend entry along the bottom.
std::string line_series_svg(const LineChart& chart, const LinePlot& plot) {
  std::string svg;
  double legend_x = kLeft;
  const double legend_y = chart.height - 8;
  for (const Series& s : chart.series) {
    std::string points;
    std::string dots;
    int n = 0;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      const std::string p = px(plot.sx(s.x[i])) + "," + px(plot.sy(s.y[i]));
      points += (n ? " " : "") + p;
      if (s.markers) {
        dots += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>", px(plot.sx(s.x[i])),
                            px(plot.sy(s.y[i])), xml_escape(s.color));
      }
      ++n;
    }
    svg += fmt::format(
        "<polyline class=\"series\" data-series=\"{}\" data-points=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"1.5\" points=\"{}\"/>\n",
        xml_escape(s.name), n, xml_escape(s.color), points);
    if (!dots.empty()) svg += dots + "\n";
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{}\"/>", px(legend_x),
                       px(legend_y - 4), xml_escape(s.color));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"legend\">{}</text>\n", px(legend_x + 16), px(legend_y),
                       xml_escape(s.name));
    legend_x += 28 + 7.0 * static_cast<double>(s.name.size());
  }
  return svg;
}

}  // namespace

std::string line_chart_svg(const LineChart& chart) {
  const int w = chart.width;
  const int h = chart.height;
  std::string svg = fmt::format(
      "<svg class=\"chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"{}\">\n",
      w, h, w, h, xml_escape(chart.title));
  svg += fmt::format("<text x=\"{}\" y=\"18\" class=\"title\">{}</text>\n", kLeft, xml_escape(chart.title));
  LinePlot plot;
  for (const Series& s : chart.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      plot.xr.add(s.x[i]);
      plot.yr.add(s.y[i]);
    }
  }
  if (plot.xr.empty()) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"note\">no data</text>\n</svg>\n", kLeft, h / 2);
    return svg;
  }
  plot.xr = padded(plot.xr);
  plot.yr = padded(plot.yr);
  plot.plot_w = w - kLeft - kRight;
  plot.plot_h = h - kTop - kBottom;
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"plot\"/>\n", kLeft, kTop,
                     px(plot.plot_w), px(plot.plot_h));
  svg += line_axes_svg(chart, plot);
  svg += line_series_svg(chart, plot);
  svg += "</svg>\n";
  return svg;
}

namespace {

constexpr int kLabelWidth = 190;
constexpr int kBarHeight = 18;
constexpr int kGap = 8;

// A stacked-bar chart's scale: bytes from 0 to 5% past `top` (the largest bar, marker or cap) across plot_w.
struct BarPlot {
  double top = 0, plot_w = 0, axis_y = 0;
  double sx(double v) const { return kLabelWidth + v / (top * 1.05) * plot_w; }
};

// Ticks at round numbers of the largest binary unit below the top (8 MiB, 16 MiB; not 9.54 MiB).
std::string bar_ticks_svg(const BarPlot& plot) {
  std::string svg;
  double unit = 1;
  while (unit * 1024 <= plot.top) unit *= 1024;
  for (double tick : nice_ticks(0, plot.top * 1.05 / unit, 5)) {
    const double t = tick * unit;
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"grid\"/>", px(plot.sx(t)), kTop,
                       px(plot.sx(t)), px(plot.axis_y));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xtick\">{}</text>\n", px(plot.sx(t)), px(plot.axis_y + 14),
                       xml_escape(format_bytes(static_cast<std::int64_t>(t))));
  }
  return svg;
}

// Bar b: its label, a segment per positive value in stacking order, and its marker if any.
std::string bar_row_svg(const StackedBars& chart, const BarPlot& plot, int b) {
  const double y = kTop + b * (kBarHeight + kGap);
  const auto& label = b < static_cast<int>(chart.bar_labels.size()) ? chart.bar_labels[static_cast<std::size_t>(b)]
                                                                     : std::string();
  std::string svg = fmt::format("<text x=\"{}\" y=\"{}\" class=\"ytick\">{}</text>\n", kLabelWidth - 6, px(y + 13),
                                xml_escape(label));
  double at = 0;
  const auto& row = chart.values[static_cast<std::size_t>(b)];
  svg += fmt::format("<g class=\"bar\" data-bar=\"{}\">", b);
  for (std::size_t s = 0; s < row.size(); ++s) {
    const double v = std::max(0.0, row[s]);
    if (v <= 0) continue;
    const std::string& name = s < chart.segment_names.size() ? chart.segment_names[s] : std::string();
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>",
                       px(plot.sx(at)), px(y), px(plot.sx(at + v) - plot.sx(at)), kBarHeight,
                       s < chart.segment_colors.size() ? xml_escape(chart.segment_colors[s]) : "#888",
                       xml_escape(name), xml_escape(format_bytes(static_cast<std::int64_t>(v))));
    at += v;
  }
  svg += "</g>\n";
  if (b < static_cast<int>(chart.markers.size())) {
    const double m = plot.sx(chart.markers[static_cast<std::size_t>(b)]);
    svg += fmt::format("<path d=\"M{} {} l4 {} l-8 0 z\" class=\"marker\"><title>{}: {}</title></path>\n", px(m),
                       px(y + kBarHeight), -6, xml_escape(chart.marker_name),
                       xml_escape(format_bytes(static_cast<std::int64_t>(chart.markers[static_cast<std::size_t>(b)]))));
  }
  return svg;
}

// The legend below the axis: a swatch per segment (wrapping at the chart's width), then the marker's.
std::string bar_legend_svg(const StackedBars& chart, const BarPlot& plot) {
  const int w = chart.width;
  std::string svg;
  double legend_x = 8;
  double legend_y = plot.axis_y + 40;
  for (std::size_t s = 0; s < chart.segment_names.size(); ++s) {
    if (legend_x + 24 + 7.0 * static_cast<double>(chart.segment_names[s].size()) > w) {  // wrap
      legend_x = 8;
      legend_y += 18;
    }
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>", px(legend_x),
                       px(legend_y - 9), s < chart.segment_colors.size() ? xml_escape(chart.segment_colors[s]) : "#888");
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"legend\">{}</text>\n", px(legend_x + 14), px(legend_y),
                       xml_escape(chart.segment_names[s]));
    legend_x += 24 + 7.0 * static_cast<double>(chart.segment_names[s].size());
  }
  if (!chart.markers.empty()) {
    if (legend_x + 24 + 7.0 * static_cast<double>(chart.marker_name.size()) > w) {
      legend_x = 8;
      legend_y += 18;
    }
    svg += fmt::format("<path d=\"M{} {} l4 -8 l-8 0 z\" class=\"marker\"/><text x=\"{}\" y=\"{}\" class=\"legend\">{}"
                       "</text>\n",
                       px(legend_x + 4), px(legend_y), px(legend_x + 12), px(legend_y), xml_escape(chart.marker_name));
  }
  return svg;
}

}  // namespace

std::string stacked_bars_svg(const StackedBars& chart) {
  const int bars = static_cast<int>(chart.values.size());
  const int w = chart.width;
  const int h = kTop + bars * (kBarHeight + kGap) + 82;  // axis, tick labels, up to two legend rows
  std::string svg = fmt::format(
      "<svg class=\"chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"{}\">\n",
      w, h, w, h, xml_escape(chart.title));
  svg += fmt::format("<text x=\"8\" y=\"18\" class=\"title\">{}</text>\n", xml_escape(chart.title));
  BarPlot plot;
  plot.top = chart.cap;
  for (std::size_t b = 0; b < chart.values.size(); ++b) {
    double sum = 0;
    for (double v : chart.values[b]) sum += std::max(0.0, v);
    plot.top = std::max(plot.top, sum);
    if (b < chart.markers.size()) plot.top = std::max(plot.top, chart.markers[b]);
  }
  if (bars == 0 || plot.top <= 0) {
    svg += fmt::format("<text x=\"8\" y=\"{}\" class=\"note\">no data</text>\n</svg>\n", kTop + 16);
    return svg;
  }
  plot.plot_w = w - kLabelWidth - 24;
  plot.axis_y = kTop + bars * (kBarHeight + kGap);
  svg += bar_ticks_svg(plot);
  for (int b = 0; b < bars; ++b) svg += bar_row_svg(chart, plot, b);
  if (chart.cap > 0) {
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"cap\"/>", px(plot.sx(chart.cap)),
                       kTop - 4, px(plot.sx(chart.cap)), px(plot.axis_y));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"captext\">cap {}</text>\n", px(plot.sx(chart.cap)), kTop - 6,
                       xml_escape(format_bytes(static_cast<std::int64_t>(chart.cap))));
  }
  svg += bar_legend_svg(chart, plot);
  svg += "</svg>\n";
  return svg;
}

}  // namespace cleave::report
