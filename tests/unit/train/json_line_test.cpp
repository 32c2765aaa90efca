// JsonLine (engine/train/json_line.hpp) against nlohmann::ordered_json's dump(), which wrote metrics.jsonl before:
// the same fields added in the same order give the same bytes, for awkward doubles (zeros of both signs, the
// decimal/exponent boundaries, subnormals, the extremes, non-finite values as null), random doubles of every scale,
// the int64 extremes and keys that need escaping. A text that differs in one byte fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/train/json_line.hpp"

namespace cleave::testing::json_line_test {
namespace {

TEST(JsonLine, WritesWhatNlohmannDumpWrote) {
  using limits = std::numeric_limits<double>;
  std::vector<double> doubles = {0.0, -0.0, 1.0, -3.0, 0.1, 3e-4, 1e-5, 1e-4, 0.001, 123.456, 1e15, 1e16, 1e17,
                                 123456789012345678.0, 1.5e20, 1e21, 2.5e-308, 5e-324, limits::min(), limits::max(),
                                 -limits::max(), limits::epsilon(), 84.12, 12345.0, limits::quiet_NaN(),
                                 limits::infinity(), -limits::infinity()};
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-320, 300);
  for (int k = 0; k < 2000; ++k) doubles.push_back(mantissa(gen) * std::pow(10.0, exponent(gen)));
  const std::vector<std::int64_t> integers = {0, 1, -1, 42, 1234567890123, std::numeric_limits<std::int64_t>::min(),
                                              std::numeric_limits<std::int64_t>::max()};
  const std::vector<std::string> keys = {"step", "moe_tokens_b3_e12", "quote\"d", "back\\slash", "tab\tnew\nline",
                                         std::string("ctl\x01\x1f\b\f\r", 8), "del\x7f", "utf8 \xc3\xa9"};

  train::JsonLine line;
  std::size_t rows = 0;
  for (std::size_t start = 0; start < doubles.size(); start += 5, ++rows) {
    nlohmann::ordered_json expected;
    line.begin(8, 64);  // fewer than the row's: begin()'s reservation is room, not a limit
    for (std::size_t i = 0; i < 5 && start + i < doubles.size(); ++i) {
      const double x = doubles[start + i];
      const std::string key = keys[(start + i) % keys.size()] + std::to_string(i);
      expected[key] = std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json();
      line.add(key, x);
    }
    const std::int64_t n = integers[rows % integers.size()];
    expected["count"] = n;
    line.add("count", n);
    ASSERT_EQ(std::string(line.end()), expected.dump() + "\n") << "row " << rows;
  }
  line.begin(0, 0);
  EXPECT_EQ(std::string(line.end(false)), nlohmann::ordered_json::object().dump());  // {}
}

// within_room(): the row's fields and key bytes against begin()'s (the metrics row's check of its reservation).
TEST(JsonLine, SaysWhetherARowKeptToItsRoom) {
  train::JsonLine line;
  line.begin(2, 8);
  line.add("step", std::int64_t{1});
  line.add("loss", 0.5);
  EXPECT_TRUE(line.within_room()) << "2 fields of 8 key bytes in room for 2 and 8";
  line.begin(2, 8);
  line.add("step", std::int64_t{1});
  line.add("losses", 0.5);
  EXPECT_FALSE(line.within_room()) << "10 key bytes in room for 8";
  line.begin(1, 100);
  line.add("a", 1.0);
  EXPECT_TRUE(line.within_room());
  line.add("b", 2.0);
  EXPECT_FALSE(line.within_room()) << "2 fields in room for 1";
  EXPECT_EQ(std::string(line.end(false)), R"({"a":1.0,"b":2.0})");  // room is not a limit
  line.begin(0, 0);
  EXPECT_TRUE(line.within_room());
}

}  // namespace
}  // namespace cleave::testing::json_line_test
