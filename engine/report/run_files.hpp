// Reading a run directory for the report: metrics.jsonl (required), config.json and run.json (optional; a
// run written before they existed, or one that stopped early, still gets curves).
//
// Invariant: every error names the file, and for metrics.jsonl the 1-based line, and says what was expected;
// nothing here writes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/report/run_summary.hpp"

namespace cleave::report {

// metrics.jsonl as columns: steps[i] is row i's "step"; columns[key][i] is row i's number for key, NaN where
// the row lacks it or holds null (eval_loss appears only on evaluation rows).
struct MetricsTable {
  std::vector<double> steps;
  std::map<std::string, std::vector<double>> columns;
  const std::vector<double>* column(const std::string& key) const;  // null when no row has the key
};

// Throws cleave::Error naming `path` and the line when a non-empty line is not a JSON object with an integer
// "step" and number-or-null values, and naming `path` when it holds no rows. A last line without its newline that
// does not parse (a row cut short by an interrupted run) is left out with a warning, as a resume drops it.
MetricsTable parse_metrics(const std::string& text, const std::string& path);

struct RunFiles {
  std::string dir;
  MetricsTable metrics;
  std::string config_text;            // config.json as written ("" = absent)
  std::optional<RunSummary> summary;  // run.json (nullopt = absent)
};

// Reads `dir`. Throws Error when dir is not a directory, when metrics.jsonl is missing or corrupt, or when
// config.json / run.json exist but do not parse.
RunFiles read_run_dir(const std::string& dir);

}  // namespace cleave::report
