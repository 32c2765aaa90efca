// `cleave report RUN_DIR`: (re)writes RUN_DIR/report.html from the run's files (metrics.jsonl, run.json,
// config.json), the same page `cleave train` writes at the end of a run. No MPI, no model: it only reads files.
#include <cstdio>
#include <string>

#include "engine/cli/commands.hpp"
#include "engine/core/error.hpp"
#include "engine/report/html_report.hpp"

namespace cleave::cli {
namespace {

constexpr const char* kUsage = R"(usage: cleave report RUN_DIR

Writes RUN_DIR/report.html: loss (train and eval), learning-rate, gradient-norm, throughput and step-time
curves over steps, per-rank peak memory by category against device.memory_limit, the layout and the resolved
config. One self-contained file (inline SVG and CSS, no scripts, no external assets); opens offline.

Reads RUN_DIR/metrics.jsonl (required; a corrupt line is an error naming the file and line), run.json and
config.json (optional). cleave train writes the same report at the end of every run (train.report).
)";

}  // namespace

int run_report(int argc, char** argv) {
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    CLEAVE_CHECK(!arg.starts_with("-"), "report: unknown option '{}' (see cleave report --help)", arg);
    CLEAVE_CHECK(dir.empty(), "report: one run directory expected, got '{}' and '{}'", dir, arg);
    dir = arg;
  }
  CLEAVE_CHECK(!dir.empty(), "report: give a run directory: cleave report RUN_DIR (see cleave report --help)");
  std::printf("%s\n", report::write_report(dir).c_str());
  return 0;
}

}  // namespace cleave::cli
