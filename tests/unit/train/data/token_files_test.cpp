// Token-file loaders: llm.c shards, headerless uint16 and byte-level text, written to a temp dir; windows
// are contiguous and shifted by one; splits; every file error names the file and the numbers.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "data_test_util.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/data/token_file.hpp"

namespace cleave::train::token_files_test {
namespace {

using namespace test_util;

config::RunConfig token_config(const std::string& path, const std::string& format, std::int64_t seq_len = 7,
                               std::int64_t vocab = 60000) {
  return config::parse_config("{}", "test",
                              {"data.type=tokens", "data.path=" + path, "data.format=" + format,
                               "model.seq_len=" + std::to_string(seq_len), "model.vocab_size=" + std::to_string(vocab),
                               "model.d_model=16", "model.n_heads=2"});
}

// Every row is a window [o, o + T] of position tokens inside [lo, hi): inputs o.., targets o+1...
void expect_windows(const Batch& b, std::int64_t lo, std::int64_t hi) {
  const std::int64_t rows = b.inputs.dim(0), t_len = b.inputs.dim(1);
  ASSERT_EQ(b.targets.shape(), b.inputs.shape());
  const auto* in = b.inputs.data<std::int32_t>();
  const auto* tg = b.targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t o = in[r * t_len];
    EXPECT_GE(o, lo);
    EXPECT_LE(o + t_len, hi - 1);
    for (std::int64_t t = 0; t < t_len; ++t) {
      ASSERT_EQ(in[r * t_len + t], o + t);
      ASSERT_EQ(tg[r * t_len + t], o + t + 1);
    }
  }
}

TEST(TokenFiles, LlmcShardWindowsAndSplits) {
  TempDir dir;
  const auto path = dir.file("shard.bin");
  write_llmc(path, test_util::position_tokens(1000));
  const auto c = token_config(path, "llmc");  // val_fraction 0.1: train [0, 900), eval [900, 1000)
  auto train = make_data_source(c, Split::kTrain);
  auto eval = make_data_source(c, Split::kEval);
  EXPECT_EQ(train->sample_shape(), Shape{7});
  EXPECT_EQ(train->input_dtype(), DType::kI32);
  const BatchLayout layout{16, 8, 0, 1};
  for (int step = 0; step < 5; ++step) {
    expect_windows(train->next_batch(step, 0, layout, cpu_allocator()), 0, 900);
    expect_windows(train->next_batch(step, 1, layout, cpu_allocator()), 0, 900);
    expect_windows(eval->next_batch(step, 0, layout, cpu_allocator()), 900, 1000);
  }
  EXPECT_NE(train->describe().find("shard.bin"), std::string::npos);
}

TEST(TokenFiles, Uint16AndSeparateValidationFile) {
  TempDir dir;
  write_uint16(dir.file("train.u16"), test_util::position_tokens(300));
  auto val = test_util::position_tokens(500);
  write_uint16(dir.file("val.u16"), std::vector<std::uint16_t>(val.begin() + 400, val.end()));
  auto c = token_config(dir.file("train.u16"), "uint16");
  c.data.val_path = dir.file("val.u16");
  auto train = make_data_source(c, Split::kTrain);
  auto eval = make_data_source(c, Split::kEval);
  const BatchLayout layout{6, 3, 0, 1};
  expect_windows(train->next_batch(3, 1, layout, cpu_allocator()), 0,
                 300);  // whole file: no held-out tail with val_path
  expect_windows(eval->next_batch(3, 1, layout, cpu_allocator()), 400, 500);
}

TEST(TokenFiles, TextBytes) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the quick brown fox jumps over the lazy dog \xc3\xa9\n";
  write_bytes(dir.file("a.txt"), text.data(), text.size());
  auto c = config::parse_config("{}", "test", {"data.type=text", "data.path=" + dir.file("a.txt"), "model.seq_len=9"});
  auto train = make_data_source(c, Split::kTrain);
  const Batch b = train->next_batch(0, 0, BatchLayout{4, 4, 0, 1}, cpu_allocator());
  const auto* in = b.inputs.data<std::int32_t>();
  const auto* tg = b.targets.data<std::int32_t>();
  for (int r = 0; r < 4; ++r) {
    std::string window;
    for (int t = 0; t < 9; ++t) {
      ASSERT_GE(in[r * 9 + t], 0);
      ASSERT_LT(in[r * 9 + t], 256);
      window += static_cast<char>(in[r * 9 + t]);
      if (t + 1 < 9) {
        ASSERT_EQ(tg[r * 9 + t], in[r * 9 + t + 1]);
      }
    }
    EXPECT_NE(text.find(window), std::string::npos) << window;
  }
}

TEST(TokenFiles, LlmcHeaderErrors) {
  TempDir dir;
  const auto tokens = test_util::position_tokens(100);
  const auto truncated = dir.file("truncated.bin");
  write_llmc(truncated, tokens, 20240520, 1, 150);
  expect_error([&] { TokenFile f(truncated, TokenFormat::kLlmc); },
               {truncated, "150 tokens", "1324 bytes", "1224 bytes", "truncated"});
  const auto extra = dir.file("extra.bin");
  write_llmc(extra, tokens, 20240520, 1, 90);
  expect_error([&] { TokenFile f(extra, TokenFormat::kLlmc); }, {extra, "90 tokens", "20 extra bytes"});
  const auto magic = dir.file("magic.bin");
  write_llmc(magic, tokens, 12345);
  expect_error([&] { TokenFile f(magic, TokenFormat::kLlmc); }, {magic, "magic number 12345", "20240520", "uint16"});
  const auto version = dir.file("version.bin");
  write_llmc(version, tokens, 20240520, 2);
  expect_error([&] { TokenFile f(version, TokenFormat::kLlmc); }, {version, "version 2", "expected 1"});
  const auto zero = dir.file("zero.bin");
  write_llmc(zero, {}, 20240520, 1, 0);
  expect_error([&] { TokenFile f(zero, TokenFormat::kLlmc); }, {zero, "0 tokens"});
  const auto tiny = dir.file("tiny.bin");
  write_uint16(tiny, {1, 2, 3});
  expect_error([&] { TokenFile f(tiny, TokenFormat::kLlmc); }, {tiny, "6 bytes", "1024-byte llm.c header"});
}

// locate_tokens is the header check TokenFile runs on the mapped file (and tests/fuzz/token_file_fuzz.cpp on
// its input): the range it returns always ends at the end of the bytes, whatever the header claims.
TEST(TokenFiles, LocateTokensChecksTheHeaderAgainstTheBytes) {
  std::vector<std::uint8_t> shard(static_cast<std::size_t>(kLlmcHeaderBytes) + 6, 0);
  const std::int32_t header[3] = {kLlmcMagic, kLlmcVersion, 3};
  std::memcpy(shard.data(), header, sizeof header);
  const TokenRange range = locate_tokens(shard, TokenFormat::kLlmc, "data file s.bin");
  EXPECT_EQ(range.offset, kLlmcHeaderBytes);
  EXPECT_EQ(range.count, 3);
  // The largest count a header can hold, on a 1030-byte file: refused with both sizes, no overflow.
  const std::int32_t huge[3] = {kLlmcMagic, kLlmcVersion, 2147483647};
  std::memcpy(shard.data(), huge, sizeof huge);
  expect_error([&] { (void)locate_tokens(shard, TokenFormat::kLlmc, "data file s.bin"); },
               {"data file s.bin", "2147483647 tokens", "4294968318 bytes", "1030 bytes", "truncated"});
  const std::int32_t negative[3] = {kLlmcMagic, kLlmcVersion, -5};
  std::memcpy(shard.data(), negative, sizeof negative);
  expect_error([&] { (void)locate_tokens(shard, TokenFormat::kLlmc, "data file s.bin"); }, {"-5 tokens"});
  EXPECT_EQ(locate_tokens(shard, TokenFormat::kUint16, "u").count, 515);
  EXPECT_EQ(locate_tokens(shard, TokenFormat::kText, "t").count, 1030);
  expect_error([&] { (void)locate_tokens({}, TokenFormat::kText, "data file e.txt"); }, {"e.txt", "empty (0 bytes)"});
}

TEST(TokenFiles, MissingEmptyAndOddFiles) {
  TempDir dir;
  const auto missing = dir.file("missing.bin");
  expect_error([&] { TokenFile f(missing, TokenFormat::kUint16); }, {missing, "no such file"});
  const auto empty = dir.file("empty.bin");
  write_bytes(empty, "", 0);
  expect_error([&] { TokenFile f(empty, TokenFormat::kUint16); }, {empty, "empty", "0 bytes"});
  expect_error([&] { TokenFile f(empty, TokenFormat::kText); }, {empty, "empty"});
  const auto odd = dir.file("odd.u16");
  write_bytes(odd, "abcde", 5);
  expect_error([&] { TokenFile f(odd, TokenFormat::kUint16); }, {odd, "5 bytes", "odd size"});
  expect_error([&] { TokenFile f(dir.path().string(), TokenFormat::kUint16); }, {"not a regular file"});
}

TEST(TokenFiles, TooShortForSeqLenNamesTheSplit) {
  TempDir dir;
  const auto path = dir.file("short.bin");
  write_llmc(path, test_util::position_tokens(40));
  // Train split: first 90% of 40 = 36 tokens; seq_len 40 needs 41.
  expect_error([&] { (void)make_data_source(token_config(path, "llmc", 40), Split::kTrain); },
               {path, "train split", "36 tokens", "seq_len 40", "41"});
  // Eval split: last 10% = 4 tokens; seq_len 7 needs 8.
  expect_error([&] { (void)make_data_source(token_config(path, "llmc", 7), Split::kEval); },
               {path, "eval split", "4 tokens", "seq_len 7", "8"});
}

TEST(TokenFiles, TokenOutsideVocabulary) {
  TempDir dir;
  const auto path = dir.file("big.u16");
  auto tokens = test_util::position_tokens(200, 50);
  tokens[123] = 50256;
  write_uint16(path, tokens);
  expect_error([&] { (void)make_data_source(token_config(path, "uint16", 7, 256), Split::kTrain); },
               {path, "token 50256", "position 123", "model.vocab_size 256", "50257"});
}

}  // namespace
}  // namespace cleave::train::token_files_test
