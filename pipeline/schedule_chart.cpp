// Step × rank grid rendering (see schedule_chart.hpp).
#include "pipeline/schedule_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace cleave::pipeline {

namespace {

// Row of every action ([rank][position]): its dry-run step, or after the last step, in list order, for actions that
// never ran. `rows` counts them all.
struct ActionRows {
  std::vector<std::vector<int>> row_of;
  int rows = 0;
};

ActionRows action_rows(const Schedule& schedule, const DryRun& run) {
  const int p = static_cast<int>(schedule.ranks.size());
  ActionRows out{std::vector<std::vector<int>>(p), run.num_steps};
  for (int r = 0; r < p; ++r) {
    const auto& actions = schedule.ranks[r];
    int unreached = 0;
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const bool ran = r < static_cast<int>(run.step.size()) && i < static_cast<int>(run.step[r].size()) &&
                       run.step[r][i] >= 0;
      const int row = ran ? run.step[r][i] : run.num_steps + unreached++;
      out.row_of[r].push_back(row);
      out.rows = std::max(out.rows, row + 1);
    }
  }
  return out;
}

// The grid's cells ([row][rank]), the marked actions drawn >>so<<, the rows holding a mark and the column width.
struct Cells {
  std::vector<std::vector<std::string>> table;
  std::set<int> marked_rows;
  std::size_t width = 6;
};

Cells cells_of(const Schedule& schedule, const ActionRows& rows, const std::vector<GridMark>& marks) {
  const int p = static_cast<int>(schedule.ranks.size());
  std::set<std::pair<int, int>> marked;
  for (const auto& mark : marks) marked.insert({mark.rank, mark.position});
  Cells out;
  out.table.assign(rows.rows, std::vector<std::string>(p));
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < static_cast<int>(schedule.ranks[r].size()); ++i) {
      std::string text = format_action(schedule.ranks[r][i]);
      if (marked.count({r, i})) {
        text = ">>" + text + "<<";
        out.marked_rows.insert(rows.row_of[r][i]);
      }
      out.width = std::max(out.width, text.size());
      out.table[rows.row_of[r][i]][r] = std::move(text);
    }
  }
  return out;
}

// Which of `rows` rows to print: all, or past options.max_rows the first max_rows, or `context` rows around each mark.
std::vector<bool> rows_to_print(int rows, const std::set<int>& marked_rows, const GridOptions& options) {
  std::vector<bool> keep(rows, true);
  if (options.max_rows <= 0 || rows <= options.max_rows) return keep;
  std::fill(keep.begin(), keep.end(), false);
  if (marked_rows.empty()) {
    for (int row = 0; row < options.max_rows; ++row) keep[row] = true;
    return keep;
  }
  for (int row : marked_rows) {
    for (int k = std::max(0, row - options.context); k <= std::min(rows - 1, row + options.context); ++k) keep[k] = true;
  }
  return keep;
}

// One line of cells padded to `width`, labelled, trailing blanks dropped.
std::string grid_line(const std::string& label, const std::vector<std::string>& cells, std::size_t width) {
  std::string line = fmt::format("{:>6} ", label);
  for (const std::string& cell : cells) line += fmt::format(" {:<{}}", cell, width);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + '\n';
}

}  // namespace

std::string format_grid(const Schedule& schedule, const DryRun& run, const GridOptions& options) {
  const int p = static_cast<int>(schedule.ranks.size());
  const int reached_rows = run.num_steps;
  const ActionRows rows = action_rows(schedule, run);
  const Cells cells = cells_of(schedule, rows, options.marks);
  const std::vector<bool> keep = rows_to_print(rows.rows, cells.marked_rows, options);

  std::vector<std::string> header;
  for (int r = 0; r < p; ++r) header.push_back(fmt::format("rank {}", r));
  std::string out = grid_line("step", header, cells.width);
  int skipped = 0;
  auto flush_skipped = [&] {
    if (skipped > 0) out += fmt::format("{:>6}   ... {} step{} not shown ...\n", "", skipped, skipped == 1 ? "" : "s");
    skipped = 0;
  };
  for (int row = 0; row < rows.rows; ++row) {
    if (row == reached_rows && reached_rows < rows.rows) {
      flush_skipped();
      out += fmt::format("{:>6}   ---- never ran in the dry run (in list order) ----\n", "");
    }
    if (!keep[row]) {
      ++skipped;
      continue;
    }
    flush_skipped();
    const std::string label = row < reached_rows ? fmt::format("{}", row) : fmt::format("+{}", row - reached_rows);
    out += grid_line(label, cells.table[row], cells.width);
  }
  flush_skipped();
  return out;
}

std::string format_grid(const Schedule& schedule, const GridOptions& options) {
  const ActionIndex index(schedule);
  return format_grid(schedule, dry_run(schedule, index), options);
}

}  // namespace cleave::pipeline
