// ProgressLine: what a command that runs for more than a few seconds says while it works, on stderr (stdout keeps
// the command's result): "profile: block 3/40 (transformer_block d32 h4 ff128 T16, tp 2, micro-batch 4), 12 s,
// about 30 s left". On a terminal each update redraws one line in place; into a file or a pipe it writes the first
// item, the last, and at most one line per `interval_s` between them, so a log gets a few lines, not one per item.
// line() always writes (one line per item of a command whose items take seconds each: a trial run).
// Invariant: no global state (one object per command); a disabled line (ranks other than 0) writes nothing.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

namespace cleave {

class ProgressLine {
 public:
  // `command` prefixes every line ("profile"); `live` defaults to whether `out` is a terminal.
  explicit ProgressLine(std::string command, bool enabled = true, std::FILE* out = stderr,
                        std::optional<bool> live = std::nullopt, double interval_s = 10.0);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Item `done` (1-based) of `total` is `what`: "<command>: <what> <done>/<total>, <elapsed>, about <eta> left".
  void update(int done, int total, const std::string& noun, const std::string& what);
  // "<command>: <text>", always written (a live line in progress is ended first).
  void line(const std::string& text);
  // Ends a live line (a newline after the last redraw); safe to call more than once.
  void finish();
  double elapsed_s() const;

 private:
  void write(const std::string& text, bool keep);

  std::string command_;
  bool enabled_;
  std::FILE* out_;
  bool live_;
  double interval_s_;
  double last_written_s_ = -1;
  bool open_ = false;  // a live line without its newline yet
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// "12 s", "3 min 05 s", "1 h 02 min".
std::string format_seconds(double seconds);

}  // namespace cleave
