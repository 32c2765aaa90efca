// report.html: one self-contained page per run — loss (train and eval), learning rate, gradient norm,
// throughput and step time over steps, per-rank peak memory by category against the cap (with the memory plan's
// page-locked host line beside the estimate where a GPU run's moe blocks have one), the layout and the
// resolved config. Inline SVG and CSS only: no scripts, no external URL, no src= attribute, so it opens
// offline and can be mailed as one file.
//
// Invariant: the page is a pure function of the run directory's files (run_files.hpp), so `cleave report
// RUN_DIR` on a finished run regenerates the same bytes that `cleave train` wrote.
#pragma once

#include <string>

#include "engine/report/run_files.hpp"

namespace cleave::report {

std::string build_report_html(const RunFiles& run);

// Reads `dir`, builds the page and writes <dir>/report.html (via a temporary file and a rename, so a full
// disk leaves no half-written page). Returns the path. Throws cleave::Error naming the file on failure.
std::string write_report(const std::string& dir);

}  // namespace cleave::report
