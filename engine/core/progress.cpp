// See progress.hpp.
#include "engine/core/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace cleave {

std::string format_seconds(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {:02} s", s / 60, s % 60);
  return fmt::format("{} h {:02} min", s / 3600, (s % 3600) / 60);
}

ProgressLine::ProgressLine(std::string command, bool enabled, std::FILE* out, std::optional<bool> live,
                           double interval_s)
    : command_(std::move(command)),
      enabled_(enabled),
      out_(out),
      live_(live.value_or(::isatty(::fileno(out)) == 1)),
      interval_s_(interval_s) {}

ProgressLine::~ProgressLine() { finish(); }

double ProgressLine::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLine::update(int done, int total, const std::string& noun, const std::string& what) {
  if (!enabled_) return;
  const double now = elapsed_s();
  const bool first = last_written_s_ < 0, last = done >= total;
  if (!live_ && !first && !last && now - last_written_s_ < interval_s_) return;
  std::string text = fmt::format("{} {}/{}", noun, done, total);
  if (!what.empty()) text += " (" + what + ")";
  text += ", " + format_seconds(now);
  if (done > 0 && !last) text += ", about " + format_seconds(now / done * (total - done)) + " left";
  write(text, !live_ || last);
  last_written_s_ = now;
}

void ProgressLine::line(const std::string& text) {
  if (!enabled_) return;
  finish();
  write(text, true);
}

void ProgressLine::finish() {
  if (!open_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  open_ = false;
}

void ProgressLine::write(const std::string& text, bool keep) {
  const std::string full = command_ + ": " + text;
  if (live_) {
    std::fprintf(out_, "\r%s\x1b[K%s", full.c_str(), keep ? "\n" : "");
    open_ = !keep;
  } else {
    std::fprintf(out_, "%s\n", full.c_str());
  }
  std::fflush(out_);
}

}  // namespace cleave
