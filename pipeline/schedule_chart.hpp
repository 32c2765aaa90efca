// The step × rank grid: a schedule drawn as text, one row per dry-run step, one column per pp rank.
//
// Each action sits in the row of the dry-run step at which it ran (dependencies.hpp), so empty cells are
// bubbles of a unit-cost run. Actions that never ran (a deadlock, a missing dependency) follow below a
// separator, in list order. Marked actions are drawn as >>2F5<< ; validator errors use this.
#pragma once

#include <string>
#include <vector>

#include "pipeline/dependencies.hpp"
#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

struct GridMark {
  int rank = 0;
  int position = 0;  // index in the rank's action list
};

struct GridOptions {
  std::vector<GridMark> marks;
  int max_rows = 0;   // 0 = every row; otherwise long grids keep `context` rows around each mark
  int context = 6;
};

std::string format_grid(const Schedule& schedule, const DryRun& run, const GridOptions& options = {});
// Runs the dry run itself.
std::string format_grid(const Schedule& schedule, const GridOptions& options = {});

}  // namespace cleave::pipeline
