// Run outputs: metrics.jsonl (one JSON object per step), the progress line, the final summary, and the
// output directory guard.
//
// Invariants:
//  - metrics.jsonl gets exactly one line per write(), flushed before write() returns, so a crashed or
//    killed run keeps every completed step.
//  - prepare_out_dir() never touches a directory that already holds a run (metrics.jsonl or config.json):
//    it throws before creating or writing anything.
//  - A failed write (a full disk, a file-size limit) truncates metrics.jsonl back to its last complete line
//    before throwing, so every earlier row stays intact and the file never ends in half a row.
//  - ProgressPrinter prints plain lines when its stream is not a terminal (logs, CI); on a terminal it also
//    redraws a live bar with an ETA every step (carriage return, no newline). Kept lines look like
//      step 120/500 | loss 2.3412 | lr 3.0e-04 | gnorm 0.842 | 12.3k tok/s | 1.52 TFLOP/s/rank | MFU 41.3% |
//      84.1 ms/step | peak 123.4 MiB
//    (one line; MFU only with a peak, "| non-finite N (skipped M)" appended once a step was not finite) and the
//    live line like
//      [#########...........]  24% 120/500 | loss 2.3412 | 12.3k tok/s | ETA 1m02s
//    Both are formatted into a buffer the printer keeps (its inline room holds them), so printing a steady-state
//    step's line allocates nothing.
// Only rank 0 should create these (the caller decides); nothing here knows about ranks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/config/config.hpp"
#include "engine/train/json_line.hpp"

namespace cleave::train {

struct StepMetrics {
  std::int64_t step = 0;      // 1-based: optimizer steps completed, this one included
  double loss = 0.0;          // mean training loss of the step's global batch
  double lr = 0.0;            // learning rate used by this step
  double grad_norm = 0.0;     // global gradient norm before clipping
  double tokens_per_s = 0.0;  // items per second over all ranks (tokens for gpt, samples for mlp / cnn)
  double flops_per_rank = std::numeric_limits<double>::quiet_NaN();  // achieved model FLOP/s per rank
  double mfu = std::numeric_limits<double>::quiet_NaN();  // flops_per_rank / peak; NaN = no peak known
  double step_ms = 0.0;       // wall time of the step
  std::int64_t peak_bytes = 0;  // peak device memory (allocator) so far on this rank
  // Steps so far in this run directory (a resumed run carries its earlier rows' counts on) whose loss or
  // gradient norm was not finite, and those of them whose update was skipped (train.skip_nonfinite_steps).
  std::int64_t nonfinite_steps = 0;
  std::int64_t skipped_steps = 0;
  std::vector<std::pair<std::string, double>> extra;  // more fields: eval_loss, eval_accuracy, ...
  std::vector<std::pair<std::string, std::int64_t>> counts;  // integer fields: resumed_at_step, config_changes
};

// The counts a metrics row carries on (StepMetrics::nonfinite_steps, skipped_steps).
struct StepCounts {
  std::int64_t nonfinite_steps = 0;
  std::int64_t skipped_steps = 0;
};

// Creates `path` (with parents) for a new run. Throws InputError (bad input, exit 64) naming the path when it is
// empty, exists as a file, cannot be created where it is (check_output_dir, engine/core/output_path.hpp) or already
// holds a run (metrics.jsonl or config.json; the message suggests --set train.out_dir=<a free name>); a plain Error
// when the creation the check allowed then fails.
void prepare_out_dir(const std::string& path);
// prepare_out_dir's refusal of a directory that holds a run, as bad input (InputError: exit 64), for `cleave train`
// to make before the world and the model are built. Reads only.
void check_out_dir_holds_no_run(const std::string& path);
// A fresh run's checkpoint.dir that already holds checkpoints (step_NNNNNNN/ or the latest pointer: another run's,
// whose steps the fresh run's saves would replace and prune) is bad input (InputError, naming them). Reads only.
void check_checkpoint_dir_holds_no_run(const std::string& dir);
// The checkpoint directory of `config`: checkpoint.dir, else <train.out_dir>/checkpoints.
std::string checkpoint_root_of(const config::RunConfig& config);

// Writes `text` to `path` (truncating). Throws Error naming the file and the system's reason when it cannot
// be opened or written completely (a full disk included).
void write_text_file(const std::string& path, const std::string& text);

// A resumed run at step k: keeps the rows of `path` whose "step" is <= k (in order) and drops the rest, so
// appending from step k + 1 duplicates no step. A missing file is left missing. Returns the last kept row's
// counts (zero when it has none). A last line cut short without its newline (a crash mid-row) is dropped with a
// warning; any other row that does not parse throws Error naming the file, the line and the fix.
StepCounts keep_metrics_through(const std::string& path, std::int64_t step);

class MetricsWriter {
 public:
  // Creates (truncates) the file, or with `append` adds to its end (a resumed run); throws Error naming it
  // when it cannot be opened.
  explicit MetricsWriter(std::string path, bool append = false);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // {"step": .., "loss": .., "lr": .., "grad_norm": .., "tokens_per_s": .., "tflops_per_rank": .., "mfu": ..,
  //  "step_ms": .., "peak_bytes": .., "nonfinite_steps": .., "skipped_steps": .., <counts>..., <extra>...}; mfu
  // only when known; the counts as integers; other non-finite numbers as null (JSON has no NaN). The names in
  // counts and extra are distinct from each other and from the fixed fields. Formatted into a kept buffer
  // (json_line.hpp): a steady-state step's row allocates nothing.
  void write(const StepMetrics& metrics);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  long complete_bytes_ = 0;  // file size after the last complete row
  bool failed_ = false;
  JsonLine row_;  // the row being written (its buffer kept from row to row)
};

class ProgressPrinter {
 public:
  // `unit` is what tokens_per_s counts ("tok", "samples"); live defaults to isatty(out).
  ProgressPrinter(std::int64_t total_steps, std::int64_t log_interval, std::string unit = "tok",
                  std::FILE* out = stdout, std::optional<bool> live = std::nullopt);

  // Records the step; prints a line at step 1, every log_interval steps, the last step and every step that
  // was not finite (its nonfinite_steps count rose).
  void update(const StepMetrics& metrics);
  // "eval step 200/500 | loss 1.4123 | accuracy 93.1%" (accuracy omitted when not given).
  void eval(std::int64_t step, double loss, std::optional<double> accuracy = std::nullopt);
  // "done: 500 steps in 42.1 s | loss 5.5412 -> 1.4023 (min 1.3871) | 12.3k tok/s | 1.52 TFLOP/s/rank (MFU
  // 41.3%) | peak 123.4 MiB | non-finite 0 (skipped 0) | <where>", counting the steps this printer saw: after a
  // resume at step 300, "done: 200 steps (301 to 500, resumed at step 300) in ..." with the loss, rates and
  // peak of those steps; the rates are totals over the total time, MFU shown when the steps had a peak.
  void summary(std::string_view outputs = {});

  // Ends an open live line (a newline), so a log line printed next starts on a line of its own.
  void interrupt();

  // The progress line for one step (no newline).
  std::string format_line(const StepMetrics& metrics) const;
  // The live bar after `steps_done` steps of this run took `elapsed_s` seconds (evaluation included); the ETA
  // assumes the remaining steps take as long on average.
  std::string format_live_line(const StepMetrics& metrics, std::int64_t steps_done, double elapsed_s) const;

 private:
  // format_line's and format_live_line's text, appended to `out` (no allocation while `out` has room).
  void append_line(fmt::memory_buffer& out, const StepMetrics& metrics) const;
  void append_live_line(fmt::memory_buffer& out, const StepMetrics& metrics, std::int64_t steps_done,
                        double elapsed_s) const;
  void emit(std::string_view line, bool keep);

  std::int64_t total_steps_;
  std::int64_t log_interval_;
  std::string unit_;
  std::FILE* out_;
  bool live_;
  bool live_line_open_ = false;
  // Accumulated for the summary.
  std::int64_t steps_seen_ = 0;
  std::int64_t first_step_ = 0;  // the first step this printer saw (> 1 after a resume)
  std::int64_t last_step_ = 0;
  double total_ms_ = 0.0;
  double total_items_ = 0.0;
  double total_flops_ = 0.0;  // per rank: the sum of flops_per_rank x seconds
  double peak_flops_ = 0.0;   // per rank, from the steps' MFU (0 = none had one)
  StepCounts counts_;         // the last step's
  double first_loss_ = 0.0;
  double last_loss_ = 0.0;
  double min_loss_ = 0.0;
  std::int64_t peak_bytes_ = 0;
  double start_s_ = 0.0;  // steady clock when the printer was made (the run's start)
  fmt::memory_buffer line_;  // the line update() prints, kept from step to step (cleared, its room kept)
};

// Formatting helpers shared with the CLI: "12.3k", "1.25M"; "123.4 MiB"; "42s", "1m02s", "2h05m".
std::string format_rate(double per_second);
std::string format_duration(double seconds);
std::string format_memory(std::int64_t bytes);
// "1.52 TFLOP/s", "312.4 GFLOP/s", "85.0 MFLOP/s" ("-" when not finite).
std::string format_flops(double flops_per_s);

}  // namespace cleave::train
