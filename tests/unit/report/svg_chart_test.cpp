// SVG builders of the run report: one polyline per series with exactly one point per finite sample (NaN
// samples skipped, not drawn at zero), points inside the plot area and ordered by x, round ticks, escaped
// text, stacked bars with a cap line, and no external reference anywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/report/svg_chart.hpp"

namespace cleave::report::svg_chart_test {
namespace {

int count_matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// The "x,y" pairs of the polyline whose data-series is `name`.
std::vector<std::pair<double, double>> points_of(const std::string& svg, const std::string& name) {
  const std::regex re("data-series=\"" + name + "\" data-points=\"(\\d+)\"[^>]* points=\"([^\"]*)\"");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(svg, m, re)) << "no polyline for " << name;
  std::vector<std::pair<double, double>> out;
  std::istringstream in(m[2].str());
  for (std::string pair; in >> pair;) {
    const auto comma = pair.find(',');
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  EXPECT_EQ(out.size(), std::stoul(m[1].str())) << "data-points disagrees with the points attribute";
  return out;
}

TEST(SvgChart, OnePointPerFiniteSampleInsideThePlot) {
  LineChart chart;
  chart.title = "loss";
  chart.x_label = "step";
  chart.y_label = "loss";
  Series train{"loss", "#123456", {}, {}, false};
  for (int i = 1; i <= 37; ++i) {
    train.x.push_back(i);
    train.y.push_back(3.0 * std::exp(-0.05 * i) + 0.01 * (i % 3));
  }
  Series eval{"eval_loss", "#654321", {}, {}, true};
  for (int i = 1; i <= 37; ++i) {
    eval.x.push_back(i);
    eval.y.push_back(i % 10 == 0 || i == 37 ? 2.0 - 0.01 * i : std::nan(""));
  }
  chart.series = {train, eval};
  const std::string svg = line_chart_svg(chart);
  const auto loss = points_of(svg, "loss");
  const auto evals = points_of(svg, "eval_loss");
  ASSERT_EQ(loss.size(), 37u);
  ASSERT_EQ(evals.size(), 4u);  // steps 10, 20, 30, 37
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 0, true);
  // x increases with the step; y is inverted (a higher loss is nearer the top); all inside the viewBox.
  for (std::size_t i = 1; i < loss.size(); ++i) EXPECT_GT(loss[i].first, loss[i - 1].first);
  EXPECT_LT(loss.front().second, loss.back().second);
  for (const auto& [x, y] : loss) {
    EXPECT_GE(x, 0);
    EXPECT_LE(x, chart.width);
    EXPECT_GE(y, 0);
    EXPECT_LE(y, chart.height);
  }
  // The first and last samples span the plot's width.
  EXPECT_NEAR(loss.back().first - loss.front().first, chart.width - 64 - 16, 0.11);
  // Sparse series get markers: one circle per eval point.
  EXPECT_EQ(count_matches(svg, "<circle "), 4);
  EXPECT_EQ(svg.find("http"), std::string::npos);
  EXPECT_EQ(svg.find("src="), std::string::npos);
}

TEST(SvgChart, EmptyAndFlatSeries) {
  LineChart empty;
  empty.title = "nothing";
  empty.series = {Series{"lr", "#000", {1, 2}, {std::nan(""), std::nan("")}, false}};
  EXPECT_NE(line_chart_svg(empty).find("no data"), std::string::npos);

  LineChart flat;
  flat.series = {Series{"lr", "#000", {1, 2, 3}, {0.5, 0.5, 0.5}, false}};
  const auto pts = points_of(line_chart_svg(flat), "lr");
  ASSERT_EQ(pts.size(), 3u);
  // A constant series sits strictly inside the plot, not on its border.
  EXPECT_GT(pts[0].second, 28);
  EXPECT_LT(pts[0].second, flat.height - 56);
  EXPECT_DOUBLE_EQ(pts[0].second, pts[2].second);
}

TEST(SvgChart, EscapesText) {
  LineChart chart;
  chart.title = "a < b & \"c\"";
  chart.series = {Series{"x<y", "#000", {1, 2}, {1, 2}, false}};
  const std::string svg = line_chart_svg(chart);
  EXPECT_NE(svg.find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("a < b"), std::string::npos);
  EXPECT_EQ(xml_escape("<&>\""), "&lt;&amp;&gt;&quot;");
}

TEST(SvgChart, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const auto fractions = nice_ticks(0.13, 0.91, 4);
  const std::vector<double> expected{0.2, 0.4, 0.6, 0.8};
  ASSERT_EQ(fractions.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(fractions[i], expected[i], 1e-12);
  EXPECT_EQ(format_number(fractions[2]), "0.6");
  const auto t = nice_ticks(1, 487, 6);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front(), 100);
  EXPECT_EQ(t.back(), 400);
  EXPECT_EQ(format_number(12345), "12.3k");
  EXPECT_EQ(format_number(0.0003), "0.0003");
  EXPECT_EQ(format_number(2.5), "2.5");
  EXPECT_EQ(format_number(0), "0");
}

// A nearly flat series far from zero (tokens/s around 20.5M): the y ticks are 20.48M, 20.49M, ... and each
// label must say which (it printed "20.5M" on every tick).
TEST(SvgChart, TickLabelsAreDistinctOnANearlyFlatSeries) {
  LineChart chart;
  chart.series = {Series{"tokens_per_s", "#000", {1, 2, 3, 4}, {20.481e6, 20.502e6, 20.493e6, 20.517e6}, false}};
  const std::string svg = line_chart_svg(chart);
  std::vector<std::string> labels;
  for (std::size_t at = svg.find("class=\"ytick\">"); at != std::string::npos;
       at = svg.find("class=\"ytick\">", at + 1)) {
    const std::size_t begin = at + 14;
    labels.push_back(svg.substr(begin, svg.find('<', begin) - begin));
  }
  ASSERT_GE(labels.size(), 3u) << svg;
  std::vector<std::string> sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << ::testing::PrintToString(labels);
  EXPECT_EQ(tick_labels({20.48e6, 20.49e6, 20.5e6}), (std::vector<std::string>{"20.48M", "20.49M", "20.5M"}));
  EXPECT_EQ(tick_labels({0, 2, 4}), (std::vector<std::string>{"0", "2", "4"}));  // no digits added when not needed
}

TEST(SvgChart, XMarkersInsideThePlot) {
  LineChart chart;
  chart.series = {Series{"loss", "#000", {1, 2, 3, 4, 5, 6}, {4, 3.5, 3.2, 3, 2.9, 2.8}, false}};
  chart.x_markers = {4, 99};  // 99 is outside the data: not drawn
  chart.x_marker_label = "resumed";
  const std::string svg = line_chart_svg(chart);
  EXPECT_EQ(count_matches(svg, "class=\"xmarker\""), 1) << svg;
  EXPECT_NE(svg.find(">resumed</text>"), std::string::npos);
}

TEST(SvgChart, StackedBarsWithCap) {
  StackedBars bars;
  bars.title = "memory";
  bars.bar_labels = {"rank 0", "rank 1"};
  bars.segment_names = {"parameters", "gradients"};
  bars.segment_colors = {"#111", "#222"};
  bars.values = {{1 << 20, 2 << 20}, {3 << 20, 0}};
  bars.markers = {2.5 * (1 << 20), 3 << 20};
  bars.marker_name = "peak of the total";
  bars.cap = 4 << 20;
  const std::string svg = stacked_bars_svg(bars);
  // Three non-empty segments (the zero one is not drawn), one cap line labelled with the cap.
  EXPECT_EQ(count_matches(svg, "<rect [^>]*><title>"), 3);
  EXPECT_NE(svg.find("class=\"cap\""), std::string::npos);
  EXPECT_NE(svg.find("cap 4.00 MiB"), std::string::npos);
  EXPECT_NE(svg.find("parameters: 1.00 MiB"), std::string::npos);
  EXPECT_NE(svg.find("data-bar=\"1\""), std::string::npos);
  StackedBars none;
  EXPECT_NE(stacked_bars_svg(none).find("no data"), std::string::npos);
}

}  // namespace
}  // namespace cleave::report::svg_chart_test
