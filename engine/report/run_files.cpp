// Run directory reader (run_files.hpp).
#include "engine/report/run_files.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"

namespace cleave::report {
namespace fs = std::filesystem;

namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

std::optional<std::string> read_text(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  CLEAVE_CHECK(in.good(), "report: cannot open {} for reading", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

const std::vector<double>* MetricsTable::column(const std::string& key) const {
  auto it = columns.find(key);
  return it == columns.end() ? nullptr : &it->second;
}

MetricsTable parse_metrics(const std::string& text, const std::string& path) {
  MetricsTable table;
  std::size_t begin = 0;
  for (int number = 1; begin < text.size(); ++number) {
    const std::size_t newline = text.find('\n', begin);
    const bool complete = newline != std::string::npos;  // the trainer writes a row with its newline in one write()
    const std::string line = text.substr(begin, (complete ? newline : text.size()) - begin);
    begin = complete ? newline + 1 : text.size();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      if (!complete) {
        // The last line cut short without its newline (a run killed mid-row): that row never reached the file
        // whole; the report shows the rows before it, as a resume of the run would keep them (train/metrics.cpp).
        log::warn("report: metrics file {}: its last line ({} bytes, no newline) is a row cut short (an interrupted "
                  "run?); left out", path, line.size());
        break;
      }
      CLEAVE_THROW("report: metrics file {} line {} does not parse as JSON ({}); the file is corrupt or truncated",
                   path, number, e.what());
    }
    CLEAVE_CHECK(row.is_object(), "report: metrics file {} line {}: expected a JSON object, found {}", path, number,
                 row.type_name());
    const auto step = row.find("step");
    CLEAVE_CHECK(step != row.end() && step->is_number_integer(),
                 "report: metrics file {} line {}: expected an integer \"step\"", path, number);
    const std::size_t index = table.steps.size();
    table.steps.push_back(static_cast<double>(step->get<std::int64_t>()));
    for (auto& [key, column] : table.columns) column.push_back(kMissing);
    for (const auto& [key, value] : row.items()) {
      if (key == "step") continue;
      CLEAVE_CHECK(value.is_number() || value.is_null(),
                   "report: metrics file {} line {}: \"{}\" should be a number or null, found {}", path, number, key,
                   value.type_name());
      auto [it, added] = table.columns.try_emplace(key, std::vector<double>(index + 1, kMissing));
      (void)added;
      it->second[index] = value.is_null() ? kMissing : value.get<double>();
    }
  }
  CLEAVE_CHECK(!table.steps.empty(), "report: metrics file {} holds no rows (did the run finish a step?)", path);
  return table;
}

RunFiles read_run_dir(const std::string& dir) {
  std::error_code ec;
  CLEAVE_CHECK(fs::is_directory(dir, ec), "report: {} is not a directory (give the run's train.out_dir)", dir);
  RunFiles run;
  run.dir = dir;
  const fs::path metrics = fs::path(dir) / "metrics.jsonl";
  const auto metrics_text = read_text(metrics);
  CLEAVE_CHECK(metrics_text.has_value(),
               "report: {} not found (is {} a run directory? cleave train writes metrics.jsonl into train.out_dir)",
               metrics.string(), dir);
  run.metrics = parse_metrics(*metrics_text, metrics.string());
  const fs::path config = fs::path(dir) / "config.json";
  if (auto text = read_text(config)) {
    try {
      const nlohmann::json parsed = nlohmann::json::parse(*text);
      static_cast<void>(parsed);
    } catch (const std::exception& e) {
      CLEAVE_THROW("report: {} does not parse as JSON ({})", config.string(), e.what());
    }
    run.config_text = std::move(*text);
  }
  const fs::path summary = fs::path(dir) / "run.json";
  if (auto text = read_text(summary)) run.summary = parse_run_summary(*text, summary.string());
  return run;
}

}  // namespace cleave::report
