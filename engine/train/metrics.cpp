// metrics.jsonl writer, progress printer and output-directory guard (see metrics.hpp).
#include "engine/train/metrics.hpp"

#include <fstream>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/train/router_metrics.hpp"

namespace cleave::train {
namespace fs = std::filesystem;

void check_out_dir_holds_no_run(const std::string& path) {
  std::error_code ec;
  for (const char* marker : {"metrics.jsonl", "config.json"}) {
    if (!fs::exists(fs::path(path) / marker, ec)) continue;
    std::string free_name;
    for (int i = 2; free_name.empty(); ++i) {
      const std::string candidate = fmt::format("{}-{}", path, i);
      if (!fs::exists(candidate, ec)) free_name = candidate;
    }
    throw InputError(fmt::format("train.out_dir {} already holds a run ({} exists); nothing was written. Choose a new "
                                 "directory with --set train.out_dir={} (or remove the old run)",
                                 path, marker, free_name));
  }
}

void check_checkpoint_dir_holds_no_run(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "latest" || name.rfind("step_", 0) == 0) names.push_back(name);
  }
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  throw InputError(fmt::format("checkpoint.dir {} already holds checkpoints ({}) of another run, which this fresh run's "
                               "saves would replace and prune; nothing was written. Continue that run with --resume "
                               "auto, or choose another directory with --set checkpoint.dir=...",
                               dir, fmt::join(names, ", ")));
}

std::string checkpoint_root_of(const config::RunConfig& config) {
  return config.checkpoint.dir.empty() ? (fs::path(config.train.out_dir) / "checkpoints").string()
                                       : config.checkpoint.dir;
}

void prepare_out_dir(const std::string& path) {
  check_output_dir("train.out_dir", path);  // empty, a file, not creatable: bad input (output_path.hpp)
  std::error_code ec;
  if (fs::exists(path, ec)) {
    check_out_dir_holds_no_run(path);
    return;
  }
  fs::create_directories(path, ec);
  CLEAVE_CHECK(!ec, "train.out_dir {}: cannot create the directory ({})", path, ec.message());
}

void write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  CLEAVE_CHECK(f != nullptr, "cannot create {} ({})", path, std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
  const int code = errno;
  const bool closed = std::fclose(f) == 0;
  CLEAVE_CHECK(written && closed, "writing {} failed ({}; {} bytes to write)", path,
               std::strerror(written ? errno : code), text.size());
}

StepCounts keep_metrics_through(const std::string& path, std::int64_t step) {
  StepCounts counts;
  std::error_code ec;
  if (!fs::exists(path, ec)) return counts;
  std::ifstream in(path, std::ios::binary);
  CLEAVE_CHECK(in.good(), "metrics file {}: cannot open for reading", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::string kept;
  std::size_t begin = 0;
  for (int number = 1; begin < text.size(); ++number) {
    const std::size_t newline = text.find('\n', begin);
    const bool complete = newline != std::string::npos;  // a row is written with its newline in one write()
    const std::string line = text.substr(begin, (complete ? newline : text.size()) - begin);
    begin = complete ? newline + 1 : text.size();
    if (line.empty()) continue;
    nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded() && !complete) {
      // The last line, cut short without its newline (a crash, or a machine that went down, mid-row): the row
      // never reached the file whole; the resumed run writes its step again if it is after the checkpoint.
      log::warn("metrics file {}: its last line ({} bytes, no newline) is a row cut short; dropped", path,
                line.size());
      break;
    }
    CLEAVE_CHECK(!row.is_discarded(),
                 "metrics file {}: line {} does not parse as JSON; cannot resume into it: restore the file, or delete "
                 "that line ({} bytes: \"{}\")",
                 path, number, line.size(), line.substr(0, 40));
    if (row.value("step", std::int64_t{0}) > step) continue;
    kept += line + "\n";
    const auto count = [&row](const char* key) {
      const auto it = row.find(key);
      return it != row.end() && it->is_number_integer() ? it->get<std::int64_t>() : std::int64_t{0};
    };
    counts = {count("nonfinite_steps"), count("skipped_steps")};
  }
  write_text_file(path, kept);
  return counts;
}

MetricsWriter::MetricsWriter(std::string path, bool append) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), append ? "a" : "w");
  CLEAVE_CHECK(file_ != nullptr, "metrics file {}: cannot open for writing ({})", path_, std::strerror(errno));
  // Unbuffered: a row reaches the file in one write() or fails there, and complete_bytes_ stays exact.
  std::setvbuf(file_, nullptr, _IONBF, 0);
  if (append && std::fseek(file_, 0, SEEK_END) == 0) complete_bytes_ = std::ftell(file_);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

namespace {

// The fixed fields' names, in row order (mfu only when known). write() adds them by these names and reserves the
// row's room from their summed length, so a field added here is counted; one added to the row but not here fails
// write()'s check of the room (a bug, caught by every test that writes a row).
constexpr std::string_view kStep = "step", kLoss = "loss", kLr = "lr", kGradNorm = "grad_norm",
                           kTokensPerS = "tokens_per_s", kTflopsPerRank = "tflops_per_rank", kMfu = "mfu",
                           kStepMs = "step_ms", kPeakBytes = "peak_bytes", kNonfiniteSteps = "nonfinite_steps",
                           kSkippedSteps = "skipped_steps";
constexpr std::array kFixedKeys = {kStep,    kLoss,       kLr,        kGradNorm,       kTokensPerS,  kTflopsPerRank,
                                   kMfu,     kStepMs,     kPeakBytes, kNonfiniteSteps, kSkippedSteps};
constexpr std::size_t kFixedKeyBytes = [] {
  std::size_t bytes = 0;
  for (const std::string_view key : kFixedKeys) bytes += key.size();
  return bytes;
}();

}  // namespace

void MetricsWriter::write(const StepMetrics& m) {
  // Room for the row at its longest, in the kept buffer: no allocation once it has held a row of these fields
  // (json_line.hpp).
  std::size_t key_bytes = kFixedKeyBytes;
  for (const auto& field : m.counts) key_bytes += field.first.size();
  for (const auto& field : m.extra) key_bytes += field.first.size();
  row_.begin(kFixedKeys.size() + m.counts.size() + m.extra.size(), key_bytes);
  row_.add(kStep, m.step);
  row_.add(kLoss, m.loss);
  row_.add(kLr, m.lr);
  row_.add(kGradNorm, m.grad_norm);
  row_.add(kTokensPerS, m.tokens_per_s);
  row_.add(kTflopsPerRank, m.flops_per_rank / 1e12);
  if (std::isfinite(m.mfu)) row_.add(kMfu, m.mfu);
  row_.add(kStepMs, m.step_ms);
  row_.add(kPeakBytes, m.peak_bytes);
  row_.add(kNonfiniteSteps, m.nonfinite_steps);
  row_.add(kSkippedSteps, m.skipped_steps);
  for (const auto& [key, value] : m.counts) row_.add(key, value);
  for (const auto& [key, value] : m.extra) row_.add(key, value);
  CLEAVE_ASSERT(row_.within_room(), "metrics row of step {}: more fields or key bytes than its reserved room ({} "
                "fields, {} key bytes): a field added to write() but not to kFixedKeys", m.step,
                kFixedKeys.size() + m.counts.size() + m.extra.size(), key_bytes);
  const std::string_view line = row_.end();
  CLEAVE_CHECK(!failed_, "metrics file {}: an earlier write failed; no more rows are written", path_);
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0) {
    complete_bytes_ += static_cast<long>(line.size());
    return;
  }
  const int code = errno;
  failed_ = true;
  // A short write leaves part of the row; cut it so the file ends after the last complete row.
  const bool cut = ::ftruncate(::fileno(file_), complete_bytes_) == 0;
  std::clearerr(file_);
  CLEAVE_THROW("metrics file {}: writing the row of step {} failed ({}); the {} rows before it are intact{} (free "
               "space on the output directory's file system, or set train.out_dir elsewhere, and resume)",
               path_, m.step, code != 0 ? std::strerror(code) : "short write", m.step - 1,
               cut ? "" : " but the partial row could not be removed");
}

namespace {

// The formatting helpers' text appended to `out`: no allocation while it has room.
void append_rate(fmt::memory_buffer& out, double per_second) {
  if (!std::isfinite(per_second)) {
    out.push_back('-');
  } else if (per_second >= 1e6) {
    fmt::format_to(fmt::appender(out), "{:.2f}M", per_second / 1e6);
  } else if (per_second >= 1e3) {
    fmt::format_to(fmt::appender(out), "{:.1f}k", per_second / 1e3);
  } else {
    fmt::format_to(fmt::appender(out), "{:.1f}", per_second);
  }
}

void append_duration(fmt::memory_buffer& out, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    out.push_back('-');
    return;
  }
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  if (s < 60) {
    fmt::format_to(fmt::appender(out), "{}s", s);
  } else if (s < 3600) {
    fmt::format_to(fmt::appender(out), "{}m{:02}s", s / 60, s % 60);
  } else {
    fmt::format_to(fmt::appender(out), "{}h{:02}m", s / 3600, (s % 3600) / 60);
  }
}

void append_flops(fmt::memory_buffer& out, double f) {
  if (!std::isfinite(f)) {
    out.push_back('-');
  } else if (f >= 1e12) {
    fmt::format_to(fmt::appender(out), "{:.2f} TFLOP/s", f / 1e12);
  } else if (f >= 1e9) {
    fmt::format_to(fmt::appender(out), "{:.1f} GFLOP/s", f / 1e9);
  } else {
    fmt::format_to(fmt::appender(out), "{:.1f} MFLOP/s", f / 1e6);
  }
}

void append_memory(fmt::memory_buffer& out, std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::int64_t{1} << 30)) {
    fmt::format_to(fmt::appender(out), "{:.2f} GiB", b / static_cast<double>(1 << 30));
  } else if (bytes >= (std::int64_t{1} << 20)) {
    fmt::format_to(fmt::appender(out), "{:.1f} MiB", b / static_cast<double>(1 << 20));
  } else {
    fmt::format_to(fmt::appender(out), "{:.1f} KiB", b / 1024.0);
  }
}

template <typename Append, typename Value>
std::string formatted(Append append, Value value) {
  fmt::memory_buffer out;
  append(out, value);
  return fmt::to_string(out);
}

}  // namespace

std::string format_rate(double per_second) { return formatted(append_rate, per_second); }
std::string format_duration(double seconds) { return formatted(append_duration, seconds); }
std::string format_flops(double f) { return formatted(append_flops, f); }
std::string format_memory(std::int64_t bytes) { return formatted(append_memory, bytes); }

ProgressPrinter::ProgressPrinter(std::int64_t total_steps, std::int64_t log_interval, std::string unit,
                                 std::FILE* out, std::optional<bool> live)
    : total_steps_(total_steps),
      log_interval_(std::max<std::int64_t>(1, log_interval)),
      unit_(std::move(unit)),
      out_(out),
      live_(live.value_or(::isatty(::fileno(out)) == 1)),
      start_s_(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()) {}

std::string ProgressPrinter::format_line(const StepMetrics& m) const {
  fmt::memory_buffer out;
  append_line(out, m);
  return fmt::to_string(out);
}

std::string ProgressPrinter::format_live_line(const StepMetrics& m, std::int64_t steps_done, double elapsed_s) const {
  fmt::memory_buffer out;
  append_live_line(out, m, steps_done, elapsed_s);
  return fmt::to_string(out);
}

void ProgressPrinter::append_line(fmt::memory_buffer& out, const StepMetrics& m) const {
  const auto width = static_cast<int>(fmt::formatted_size("{}", total_steps_));
  fmt::format_to(fmt::appender(out), "step {:>{}}/{} | loss {:.4f} | lr {:.1e} | gnorm {:.3g} | ", m.step, width,
                 total_steps_, m.loss, m.lr, m.grad_norm);
  append_rate(out, m.tokens_per_s);
  fmt::format_to(fmt::appender(out), " {}/s | ", unit_);
  append_flops(out, m.flops_per_rank);
  fmt::format_to(fmt::appender(out), "/rank");
  if (std::isfinite(m.mfu)) fmt::format_to(fmt::appender(out), " | MFU {:.3g}%", 100.0 * m.mfu);
  fmt::format_to(fmt::appender(out), " | {:.1f} ms/step | peak ", m.step_ms);
  append_memory(out, m.peak_bytes);
  if (m.nonfinite_steps > 0) {
    fmt::format_to(fmt::appender(out), " | non-finite {} (skipped {})", m.nonfinite_steps, m.skipped_steps);
  }
  append_router_progress(out, m.extra);  // mixture-of-experts models
}

void ProgressPrinter::append_live_line(fmt::memory_buffer& out, const StepMetrics& m, std::int64_t steps_done,
                                       double elapsed_s) const {
  constexpr int kWidth = 20;
  const double fraction =
      total_steps_ > 0 ? std::clamp(static_cast<double>(m.step) / static_cast<double>(total_steps_), 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  const std::int64_t remaining = std::max<std::int64_t>(0, total_steps_ - m.step);
  const double eta = steps_done > 0 ? elapsed_s / static_cast<double>(steps_done) * static_cast<double>(remaining) : -1;
  out.push_back('[');
  std::fill_n(fmt::appender(out), filled, '#');
  std::fill_n(fmt::appender(out), kWidth - filled, '.');
  fmt::format_to(fmt::appender(out), "] {:>3}% {}/{} | loss {:.4f} | ", static_cast<int>(fraction * 100), m.step,
                 total_steps_, m.loss);
  append_rate(out, m.tokens_per_s);
  fmt::format_to(fmt::appender(out), " {}/s | ETA ", unit_);
  append_duration(out, eta);
}

void ProgressPrinter::interrupt() {
  if (!live_line_open_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  live_line_open_ = false;
}

void ProgressPrinter::emit(std::string_view line, bool keep) {
  const int size = static_cast<int>(line.size());
  if (live_) {
    std::fprintf(out_, "\r%.*s\x1b[K%s", size, line.data(), keep ? "\n" : "");
    live_line_open_ = !keep;
  } else if (keep) {
    std::fprintf(out_, "%.*s\n", size, line.data());
  }
  std::fflush(out_);
}

void ProgressPrinter::update(const StepMetrics& m) {
  if (steps_seen_ == 0) {
    first_loss_ = min_loss_ = m.loss;
    first_step_ = m.step;
  }
  ++steps_seen_;
  last_step_ = m.step;
  last_loss_ = m.loss;
  if (std::isfinite(m.loss)) min_loss_ = std::min(min_loss_, m.loss);
  total_ms_ += m.step_ms;
  total_items_ += m.tokens_per_s * m.step_ms / 1000.0;
  if (std::isfinite(m.flops_per_rank)) total_flops_ += m.flops_per_rank * m.step_ms / 1000.0;
  if (std::isfinite(m.mfu) && m.mfu > 0) peak_flops_ = m.flops_per_rank / m.mfu;
  const bool new_nonfinite = m.nonfinite_steps > counts_.nonfinite_steps;  // shown at once, whatever the interval
  counts_ = {m.nonfinite_steps, m.skipped_steps};
  peak_bytes_ = std::max(peak_bytes_, m.peak_bytes);
  const bool keep = m.step == 1 || m.step % log_interval_ == 0 || m.step == total_steps_ || new_nonfinite;
  // Into the kept buffer: a steady-state step's line allocates nothing (docs/ops.md).
  if (keep) {
    line_.clear();
    append_line(line_, m);
    emit(std::string_view(line_.data(), line_.size()), true);
  }
  if (live_ && m.step < total_steps_) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    line_.clear();
    append_live_line(line_, m, steps_seen_, now - start_s_);
    emit(std::string_view(line_.data(), line_.size()), false);
  }
}

void ProgressPrinter::eval(std::int64_t step, double loss, std::optional<double> accuracy) {
  std::string line = fmt::format("eval step {}/{} | loss {:.4f}", step, total_steps_, loss);
  if (accuracy) line += fmt::format(" | accuracy {:.1f}%", 100.0 * *accuracy);
  emit(line, true);
}

void ProgressPrinter::summary(std::string_view outputs) {
  const double seconds = total_ms_ / 1000.0;
  // Only the steps this process ran: a resumed run says where it continued from.
  std::string line = fmt::format("done: {} in {:.1f} s", count_of(steps_seen_, "step"), seconds);
  if (steps_seen_ > 0 && first_step_ > 1) {
    line = fmt::format("done: {} ({} to {}, resumed at step {}) in {:.1f} s", count_of(steps_seen_, "step"), first_step_,
                       last_step_, first_step_ - 1, seconds);
  }
  if (steps_seen_ > 0) {
    line += fmt::format(" | loss {:.4f} -> {:.4f} (min {:.4f}) | {} {}/s | {}/rank", first_loss_, last_loss_,
                        min_loss_, format_rate(seconds > 0 ? total_items_ / seconds : 0.0), unit_,
                        format_flops(seconds > 0 ? total_flops_ / seconds : 0.0));
    if (peak_flops_ > 0 && seconds > 0) line += fmt::format(" (MFU {:.3g}%)", 100.0 * total_flops_ / seconds / peak_flops_);
    line += fmt::format(" | peak {} | non-finite {} (skipped {})", format_memory(peak_bytes_), counts_.nonfinite_steps,
                        counts_.skipped_steps);
  }
  if (!outputs.empty()) line += fmt::format(" | {}", outputs);
  emit(line, true);
}

}  // namespace cleave::train
