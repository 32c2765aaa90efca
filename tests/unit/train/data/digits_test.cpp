// Digits loader: CSV and gzip parsing, scaling to [0, 1], the deterministic train/test split, mlp and cnn
// shapes, malformed rows and broken gzip files; the real Debian file when it is present.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "data_test_util.hpp"
#include "engine/core/rng.hpp"
#include "engine/train/data/digits.hpp"
#include "engine/train/data/make_data_source.hpp"

namespace cleave::train::digits_test {
namespace {

using test_util::expect_error;

// `rows` random rows; returns the pixel values written (0..16) and labels.
void write_digits_csv(const std::string& path, int rows, std::vector<int>& pixels, std::vector<int>& labels) {
  std::ofstream out(path);
  for (int r = 0; r < rows; ++r) {
    for (int p = 0; p < 64; ++p) {
      const int v = static_cast<int>(rng::bits64(5, 6, static_cast<std::uint64_t>(r * 64 + p)) % 17);
      pixels.push_back(v);
      out << v << ",";
    }
    labels.push_back(r % 10);
    out << r % 10 << "\n";
  }
}

config::RunConfig digits_config(const std::string& path, const std::string& model) {
  return config::parse_config("{}", "test", {"data.type=digits", "data.path=" + path, "model.type=" + model});
}

TEST(Digits, GzipRoundTripSplitAndShapes) {
  test_util::TempDir dir;
  std::vector<int> pixels, labels;
  const auto csv = dir.file("d.csv");
  write_digits_csv(csv, 25, pixels, labels);
  ASSERT_EQ(std::system(("gzip -k " + csv).c_str()), 0);
  const DigitsData data = read_digits(csv + ".gz");
  ASSERT_EQ(data.rows(), 25);
  for (std::size_t i = 0; i < pixels.size(); ++i) ASSERT_FLOAT_EQ(data.pixels[i], pixels[i] / 16.0f);
  for (std::size_t i = 0; i < labels.size(); ++i) ASSERT_EQ(data.labels[i], labels[i]);
  EXPECT_EQ(read_digits(csv).pixels, data.pixels);  // plain CSV reads the same

  // val_fraction 0.2 default: test = last floor(25 * 0.2) = 5 rows, train = first 20.
  auto train = make_data_source(digits_config(csv + ".gz", "mlp"), Split::kTrain);
  auto test = make_data_source(digits_config(csv + ".gz", "mlp"), Split::kEval);
  EXPECT_EQ(train->size(), 20);
  EXPECT_EQ(test->size(), 5);
  const Batch all_test = test->samples(0, 5, cpu_allocator());
  EXPECT_EQ(all_test.inputs.shape(), (Shape{5, 64}));
  EXPECT_EQ(all_test.targets.shape(), Shape{5});
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(all_test.targets.data<std::int32_t>()[r], labels[20 + r]);
    EXPECT_FLOAT_EQ(all_test.inputs.data<float>()[r * 64 + 13], pixels[(20 + r) * 64 + 13] / 16.0f);
  }
  auto cnn = make_data_source(digits_config(csv + ".gz", "cnn"), Split::kTrain);
  EXPECT_EQ(cnn->next_batch(0, 0, BatchLayout{4, 2, 0, 1}, cpu_allocator()).inputs.shape(), (Shape{2, 1, 8, 8}));
}

TEST(Digits, MalformedRowsNameFileLineAndValue) {
  test_util::TempDir dir;
  auto write = [&](const std::string& name, const std::string& text) {
    const auto path = dir.file(name);
    std::ofstream(path) << text;
    return path;
  };
  std::string good_row;
  for (int p = 0; p < 64; ++p) good_row += std::to_string(p % 17) + ",";
  good_row += "3\n";
  const auto short_row = write("short.csv", good_row + "1,2,3\n");
  expect_error([&] { (void)read_digits(short_row); }, {short_row, "line 2", "3 values", "expected 65"});
  const auto pixel = write("pixel.csv", good_row + "17," + good_row.substr(good_row.find(',') + 1));
  expect_error([&] { (void)read_digits(pixel); }, {pixel, "line 2", "pixel 0 is 17", "0..16"});
  const auto label = write("label.csv", good_row.substr(0, good_row.rfind(',') + 1) + "12\n");
  expect_error([&] { (void)read_digits(label); }, {label, "line 1", "label 12"});
  const auto text = write("text.csv", "a,b\n");
  expect_error([&] { (void)read_digits(text); }, {text, "line 1", "'a'", "expected an integer"});
  const auto empty = write("empty.csv", "");
  expect_error([&] { (void)read_digits(empty); }, {empty, "no rows"});
  const auto missing = dir.file("missing.csv.gz");
  expect_error([&] { (void)read_digits(missing); }, {missing, "no such file", "python3-sklearn"});
}

TEST(Digits, BrokenGzipIsAnError) {
  test_util::TempDir dir;
  std::vector<int> pixels, labels;
  const auto csv = dir.file("d.csv");
  write_digits_csv(csv, 200, pixels, labels);
  ASSERT_EQ(std::system(("gzip -k " + csv).c_str()), 0);
  const auto gz = csv + ".gz";
  const auto size = std::filesystem::file_size(gz);
  std::filesystem::resize_file(gz, size / 2);
  expect_error([&] { (void)read_digits(gz); }, {gz, "gzip -dc", "failed"});
  const auto fake = dir.file("fake.csv.gz");
  std::ofstream(fake) << "not gzip at all";
  expect_error([&] { (void)read_digits(fake); }, {fake, "gzip"});
}

TEST(Digits, RealDebianFileWhenPresent) {
  std::string path;
  for (const char* candidate : {"data/digits.csv.gz", "../data/digits.csv.gz", "../../data/digits.csv.gz",
                                "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"}) {
    if (std::filesystem::exists(candidate)) {
      path = candidate;
      break;
    }
  }
  if (path.empty()) GTEST_SKIP() << "digits.csv.gz not found (fetched by scripts/install-deps.sh into data/)";
  const DigitsData data = read_digits(path);
  EXPECT_EQ(data.rows(), 1797);
  std::vector<int> per_class(10, 0);
  for (int label : data.labels) ++per_class[static_cast<std::size_t>(label)];
  for (int count : per_class) EXPECT_GT(count, 170);
  auto test = make_data_source(digits_config(path, "cnn"), Split::kEval);
  EXPECT_EQ(test->size(), 359);  // floor(1797 × 0.2)
}

}  // namespace
}  // namespace cleave::train::digits_test
