// Counts and articles in messages (engine/core/english.hpp): the plural past one, and the article as the name is
// read (the model types, dtypes and devices messages put after "a").
#include <gtest/gtest.h>

#include "engine/core/english.hpp"

namespace cleave::english_test {
namespace {

TEST(English, CountIsSingularOnlyForOne) {
  EXPECT_EQ(count_of(1, "rank"), "1 rank");
  EXPECT_EQ(count_of(0, "rank"), "0 ranks");
  EXPECT_EQ(count_of(4, "rank"), "4 ranks");
  EXPECT_EQ(count_of(1, "entry", "entries"), "1 entry");
  EXPECT_EQ(count_of(2, "entry", "entries"), "2 entries");
}

TEST(English, ModelTypesTakeTheArticleTheyAreReadWith) {
  EXPECT_EQ(with_article("mlp"), "an mlp");
  EXPECT_EQ(with_article("moe"), "an moe");
  EXPECT_EQ(with_article("gpt"), "a gpt");
  EXPECT_EQ(with_article("cnn"), "a cnn");
  EXPECT_EQ(with_article("llama"), "a llama");
}

TEST(English, DtypesAndDevicesToo) {
  EXPECT_EQ(with_article("f32"), "an f32");
  EXPECT_EQ(with_article("f16"), "an f16");
  EXPECT_EQ(with_article("bf16"), "a bf16");
  EXPECT_EQ(with_article("i64"), "an i64");
  EXPECT_EQ(with_article("u16"), "a u16");
  EXPECT_EQ(with_article("cpu"), "a cpu");
  EXPECT_EQ(with_article("cuda"), "a cuda");
  EXPECT_EQ(with_article("integer"), "an integer");
  EXPECT_EQ(with_article("number"), "a number");
}

}  // namespace
}  // namespace cleave::english_test
