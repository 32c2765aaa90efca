// Trace export: the Chrome trace is valid JSON with one process per rank and one complete event per
// action (names like "F5 s2", times in µs), and the SVG has one box per work action, row labels, a
// legend and a time axis.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/core/error.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/trace.hpp"

namespace cleave::pipeline::trace_test {
namespace {

int occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(Trace, EventNames) {
  EXPECT_EQ(trace_event_name({ActionKind::kForward, 2, 5}), "F5 s2");
  EXPECT_EQ(trace_event_name({ActionKind::kSendB, 3, 1}), "SEND_B1 s3");
  EXPECT_EQ(trace_event_name({ActionKind::kReduceGrad, 2, -1}), "REDUCE_GRAD s2");
  EXPECT_EQ(trace_event_name({ActionKind::kOptimizerStep, -1, -1}), "OPTIMIZER_STEP");
}

TEST(Trace, ChromeTraceHasOneEventPerActionAndOneProcessPerRank) {
  SimulationCosts costs = SimulationCosts::uniform(6, 1.5, 1.0, 0.5);
  costs.p2p_latency = 0.25;
  const SimulationResult sim = simulate(make_schedule("zb_v", 3, 6, 2), costs);
  const auto trace = nlohmann::json::parse(chrome_trace_json(sim.timeline, {"zb_v", "", "ms", 1000.0}));
  int complete = 0, processes = 0;
  bool found_f = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()));
      ++processes;
    }
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["name"] == "F4 s5") {
      // Stage 5 is rank 0's second chunk in the V placement.
      EXPECT_EQ(e["pid"], 0);
      EXPECT_EQ(e["tid"], 0);
      EXPECT_EQ(e["args"]["stage"], 5);
      EXPECT_EQ(e["args"]["microbatch"], 4);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1500.0);
      found_f = true;
    }
    if (std::string(e["cat"]).rfind("SEND", 0) == 0) {
      EXPECT_EQ(e["tid"], 1);
    }
  }
  EXPECT_TRUE(found_f);
  EXPECT_EQ(processes, 3);
  EXPECT_EQ(complete, static_cast<int>(sim.lowered.num_actions()));
  EXPECT_EQ(trace["otherData"]["title"], "zb_v");
}

TEST(Trace, SvgDrawsEveryWorkActionWithLegendAndAxis) {
  const Schedule s = make_schedule("interleaved_1f1b", 4, 8, 2);
  const SimulationResult sim = simulate(s, SimulationCosts::uniform(s.num_stages));
  const std::string svg = timeline_svg(s, sim.timeline, {"interleaved_1f1b p=4 m=8 v=2", "bubble 0.158", "ms", 1000});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  // One box (with a hover title) per F and B: 4 ranks × 2 chunks × 8 micro-batches × 2.
  EXPECT_EQ(occurrences(svg, "<title>"), 4 * 2 * 8 * 2);
  EXPECT_EQ(occurrences(svg, "<text"), occurrences(svg, "</text>"));
  for (int r = 0; r < 4; ++r) EXPECT_NE(svg.find(">rank " + std::to_string(r) + "</text>"), std::string::npos);
  EXPECT_NE(svg.find("F forward"), std::string::npos);
  EXPECT_NE(svg.find("B backward (I+W)"), std::string::npos);
  EXPECT_EQ(svg.find("W weight grad"), std::string::npos);  // no W in this schedule
  EXPECT_NE(svg.find("lighter = later chunk"), std::string::npos);
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  EXPECT_NE(svg.find("<title>F7 s5 (rank 1)"), std::string::npos);
  EXPECT_NE(svg.find("interleaved_1f1b p=4 m=8 v=2"), std::string::npos);
}

TEST(Trace, FilesAreWrittenAndBadPathsNamed) {
  const Schedule s = make_schedule("1f1b", 2, 3, 1);
  const SimulationResult sim = simulate(s, SimulationCosts::uniform(2));
  const auto dir = std::filesystem::temp_directory_path() / "cleave_trace_test";
  std::filesystem::create_directories(dir);
  const std::string json_path = (dir / "t.json").string(), svg_path = (dir / "t.svg").string();
  write_chrome_trace(sim.timeline, json_path);
  write_timeline_svg(s, sim.timeline, svg_path);
  std::ifstream json_file(json_path);
  std::stringstream json_text;
  json_text << json_file.rdbuf();
  EXPECT_TRUE(nlohmann::json::accept(json_text.str()));
  EXPECT_GT(std::filesystem::file_size(svg_path), 1000u);
  std::filesystem::remove_all(dir);
  try {
    write_chrome_trace(sim.timeline, "/nonexistent/dir/t.json");
    ADD_FAILURE() << "wrote to a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open trace file '/nonexistent/dir/t.json'"), std::string::npos);
  }
}

}  // namespace
}  // namespace cleave::pipeline::trace_test
