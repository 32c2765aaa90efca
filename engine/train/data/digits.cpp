// Digits CSV(.gz) reader and source (see digits.hpp).
#include "engine/train/data/digits.hpp"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.hpp"
#include "engine/core/executable.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::train {
namespace {

std::string read_gzip(const std::string& path) {
  const std::string command = "gzip -dc -- " + shell_quote(path) + " 2>/dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  CLEAVE_CHECK(pipe != nullptr, "data file {}: cannot run `gzip -dc` ({})", path, std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  const int status = ::pclose(pipe);
  CLEAVE_CHECK_INPUT(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "data file {}: `gzip -dc` failed (exit status {}): not a complete gzip file (truncated or corrupt?)",
               path, status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status));
  return text;
}

}  // namespace

DigitsData read_digits(const std::string& path) {
  std::error_code ec;
  CLEAVE_CHECK_INPUT(std::filesystem::is_regular_file(path, ec),
               "data file {}: no such file (the digits set ships in Debian's python3-sklearn as "
               ".../sklearn/datasets/data/digits.csv.gz; set data.path)",
               path);
  std::string text;
  if (path.ends_with(".gz")) {
    text = read_gzip(path);
  } else {
    std::ifstream in(path, std::ios::binary);
    CLEAVE_CHECK(in.good(), "data file {}: cannot open for reading", path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  DigitsData data;
  data.path = path;
  std::istringstream lines(text);
  std::int64_t line_number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<std::int64_t> values;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = line.find(',', start);
      const std::string field = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      char* end = nullptr;
      const double value = std::strtod(field.c_str(), &end);
      const bool integral = end != field.c_str() && std::fabs(value) < 1e15 && value == std::trunc(value);
      CLEAVE_CHECK_INPUT(integral && std::string_view(end).find_first_not_of(" \t") == std::string_view::npos,
                   "data file {} line {}: value {} is '{}', expected an integer", path, line_number,
                   values.size() + 1, field);
      values.push_back(static_cast<std::int64_t>(value));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    CLEAVE_CHECK_INPUT(static_cast<std::int64_t>(values.size()) == DigitsData::kPixels + 1,
                 "data file {} line {}: {} values, expected {} (64 pixels and a label)", path, line_number,
                 values.size(), DigitsData::kPixels + 1);
    for (std::int64_t i = 0; i < DigitsData::kPixels; ++i) {
      CLEAVE_CHECK_INPUT(values[static_cast<std::size_t>(i)] >= 0 && values[static_cast<std::size_t>(i)] <= 16,
                   "data file {} line {}: pixel {} is {}, expected 0..16", path, line_number, i,
                   values[static_cast<std::size_t>(i)]);
      data.pixels.push_back(static_cast<float>(values[static_cast<std::size_t>(i)]) / 16.0f);
    }
    const std::int64_t label = values.back();
    CLEAVE_CHECK_INPUT(label >= 0 && label < DigitsData::kClasses, "data file {} line {}: label {} is outside 0..9", path,
                 line_number, label);
    data.labels.push_back(static_cast<std::int32_t>(label));
  }
  CLEAVE_CHECK_INPUT(data.rows() > 0, "data file {}: no rows (empty file)", path);
  return data;
}

DigitsSource::DigitsSource(std::shared_ptr<const DigitsData> data, std::int64_t begin, std::int64_t end,
                           bool image_shape, std::uint64_t seed, Split split)
    : DataSource(seed, split_name(split)), data_(std::move(data)), begin_(begin), end_(end), image_(image_shape),
      split_(split) {
  CLEAVE_ASSERT(0 <= begin && begin <= end && end <= data_->rows(), "digits rows [{}, {}) of {}", begin, end,
                data_->rows());
  CLEAVE_CHECK_INPUT(end > begin, "data file {}: the {} split is empty (rows [{}, {}) of {}); adjust data.val_fraction",
               data_->path, split_name(split), begin, end, data_->rows());
}

std::string DigitsSource::describe() const {
  return fmt::format("digits {}: {} split, rows [{}, {}) of {}, inputs {}", data_->path, split_name(split_), begin_,
                     end_, data_->rows(), sample_shape().str());
}

void DigitsSource::write_sample(std::uint64_t id, void* input, std::int32_t* target) const {
  const std::int64_t row = begin_ + static_cast<std::int64_t>(id);
  std::memcpy(input, data_->pixels.data() + row * DigitsData::kPixels, DigitsData::kPixels * sizeof(float));
  *target = data_->labels[static_cast<std::size_t>(row)];
}

}  // namespace cleave::train
