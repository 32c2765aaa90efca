// Non-finite weights refused (engine/train/checkpoint/finite_weights.hpp): finite tensors pass (large values,
// subnormals, zeros, an empty tensor); a NaN or an infinity anywhere is an error naming the source, the tensor, the
// count and the first bad element.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/train/checkpoint/finite_weights.hpp"

namespace cleave::train::finite_weights_test {
namespace {

std::string error_of(const std::vector<float>& values) {
  try {
    check_finite_weights("import: hf", "blocks.0.attn.qkv.weight", values);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FiniteWeights, FiniteTensorsPass) {
  EXPECT_EQ(error_of({}), "");
  EXPECT_EQ(error_of({0.0f, -0.0f, 3.4e38f, -3.4e38f, std::numeric_limits<float>::denorm_min(), 1.5f}), "");
}

TEST(FiniteWeights, NaNAndInfinityAreNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::string one = error_of({1.0f, 2.0f, 3.0f, nan});
  EXPECT_TRUE(one.starts_with("import: hf: tensor blocks.0.attn.qkv.weight holds 1 non-finite value of 4 (first: "
                              "element 3 is nan); nothing was loaded"))
      << one;
  const std::string many = error_of({1.0f, -inf, nan, inf, 0.5f});
  EXPECT_TRUE(many.starts_with("import: hf: tensor blocks.0.attn.qkv.weight holds 3 non-finite values of 5 (first: "
                               "element 1 is -inf)"))
      << many;
}

}  // namespace
}  // namespace cleave::train::finite_weights_test
