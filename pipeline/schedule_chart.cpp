// Step × rank grid rendering (see schedule_chart.hpp).
#include "pipeline/schedule_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace cleave::pipeline {

std::string format_grid(const Schedule& schedule, const DryRun& run, const GridOptions& options) {
  const int p = static_cast<int>(schedule.ranks.size());
  std::set<std::pair<int, int>> marked;
  for (const auto& mark : options.marks) marked.insert({mark.rank, mark.position});

  // Row of every action: its dry-run step, or after the last step for actions that never ran.
  const int reached_rows = run.num_steps;
  int rows = reached_rows;
  std::vector<std::vector<std::string>> cells(p);
  std::vector<std::vector<int>> row_of(p);
  for (int r = 0; r < p; ++r) {
    const auto& actions = schedule.ranks[r];
    int unreached = 0;
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const bool ran = r < static_cast<int>(run.step.size()) && i < static_cast<int>(run.step[r].size()) &&
                       run.step[r][i] >= 0;
      const int row = ran ? run.step[r][i] : reached_rows + unreached++;
      row_of[r].push_back(row);
      rows = std::max(rows, row + 1);
    }
  }
  std::vector<std::vector<std::string>> table(rows, std::vector<std::string>(p));
  std::set<int> marked_rows;
  std::size_t width = 6;
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < static_cast<int>(schedule.ranks[r].size()); ++i) {
      std::string text = format_action(schedule.ranks[r][i]);
      if (marked.count({r, i})) {
        text = ">>" + text + "<<";
        marked_rows.insert(row_of[r][i]);
      }
      width = std::max(width, text.size());
      table[row_of[r][i]][r] = std::move(text);
    }
  }

  // Which rows to print.
  std::vector<bool> keep(rows, true);
  if (options.max_rows > 0 && rows > options.max_rows) {
    std::fill(keep.begin(), keep.end(), false);
    if (marked_rows.empty()) {
      for (int row = 0; row < options.max_rows; ++row) keep[row] = true;
    } else {
      for (int row : marked_rows) {
        for (int k = std::max(0, row - options.context); k <= std::min(rows - 1, row + options.context); ++k) {
          keep[k] = true;
        }
      }
    }
  }

  std::string out = fmt::format("{:>6} ", "step");
  for (int r = 0; r < p; ++r) out += fmt::format(" {:<{}}", fmt::format("rank {}", r), width);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';
  int skipped = 0;
  auto flush_skipped = [&] {
    if (skipped > 0) out += fmt::format("{:>6}   ... {} step{} not shown ...\n", "", skipped, skipped == 1 ? "" : "s");
    skipped = 0;
  };
  for (int row = 0; row < rows; ++row) {
    if (row == reached_rows && reached_rows < rows) {
      flush_skipped();
      out += fmt::format("{:>6}   ---- never ran in the dry run (in list order) ----\n", "");
    }
    if (!keep[row]) {
      ++skipped;
      continue;
    }
    flush_skipped();
    const std::string label = row < reached_rows ? fmt::format("{}", row) : fmt::format("+{}", row - reached_rows);
    std::string line = fmt::format("{:>6} ", label);
    for (int r = 0; r < p; ++r) line += fmt::format(" {:<{}}", table[row][r], width);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  }
  flush_skipped();
  return out;
}

std::string format_grid(const Schedule& schedule, const GridOptions& options) {
  const ActionIndex index(schedule);
  return format_grid(schedule, dry_run(schedule, index), options);
}

}  // namespace cleave::pipeline
