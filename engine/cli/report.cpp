// `cleave report RUN_DIR`: (re)writes RUN_DIR/report.html from the run's files (metrics.jsonl, run.json,
// config.json), the same page `cleave train` writes at the end of a run. No MPI, no model: it only reads files.
#include <cstdio>
#include <string>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/report/html_report.hpp"

namespace cleave::cli {
namespace {

ArgParser report_args() {
  ArgParser p("report", "cleave report RUN_DIR",
              R"(Writes RUN_DIR/report.html: loss (train and eval), learning-rate, gradient-norm, throughput and step-time
curves over steps, per-rank peak memory by category against device.memory_limit, the layout and the resolved
config. One self-contained file (inline SVG and CSS, no scripts, no external assets); opens offline.

Reads RUN_DIR/metrics.jsonl (required; a corrupt line is an error naming the file and line), run.json and
config.json (optional). cleave train writes the same report at the end of every run (train.report).)");
  p.positional("RUN_DIR", "run directory");
  return p;
}

}  // namespace

int run_report(int argc, char** argv) {
  const ArgParser parser = report_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string dir = args.positional(0);
  CLEAVE_CHECK_INPUT(!dir.empty(), "report: give a run directory: cleave report RUN_DIR (see cleave report --help)");
  // The run directory and its files are what the command line names: missing, not a run's, or a line that does not
  // parse is bad input (exit 64), as a missing --resume or --init-from directory is.
  std::printf("%s\n", reading_input([&] { return report::write_report(dir); }).c_str());
  return 0;
}

}  // namespace cleave::cli
