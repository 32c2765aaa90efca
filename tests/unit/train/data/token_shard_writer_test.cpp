// write_llmc_shard against the reader: random tokens (up to 65535) written and read back through TokenFile
// and the data loader byte for byte; the header is the llm.c one; an existing file, no tokens and a path
// that cannot be created are refused with the file named and nothing left behind.
#include <filesystem>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "data_test_util.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/data/token_file.hpp"
#include "engine/train/data/token_shard_writer.hpp"

namespace cleave::train::token_shard_writer_test {
namespace {

using namespace test_util;

TEST(TokenShardWriter, ReadsBackThroughTokenFileAndTheLoader) {
  TempDir dir;
  const auto path = dir.file("train.bin");
  std::mt19937 rng(7);
  std::vector<std::uint16_t> tokens(1237);
  for (auto& t : tokens) t = static_cast<std::uint16_t>(rng() % 65536);
  tokens[100] = 65535;
  write_llmc_shard(path, tokens);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2 * tokens.size());
  const TokenFile file(path, TokenFormat::kLlmc);
  ASSERT_EQ(file.size(), static_cast<std::int64_t>(tokens.size()));
  for (std::size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(file.at(static_cast<std::int64_t>(i)), tokens[i]) << i;
  EXPECT_EQ(file.max_token(0, file.size()).first, 65535);

  const auto c = config::parse_config("{}", "test", {"data.type=tokens", "data.path=" + path, "data.format=llmc",
                                                     "model.seq_len=5", "model.vocab_size=65536", "model.d_model=16",
                                                     "model.n_heads=2"});
  auto source = make_data_source(c, Split::kTrain);
  const Batch b = source->next_batch(0, 0, BatchLayout{4, 4, 0, 1}, cpu_allocator());
  const auto* in = b.inputs.data<std::int32_t>();
  const auto* tg = b.targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < 4; ++r) {
    // Each window is a run of the written tokens: find where it starts and compare all of it.
    std::size_t at = 0;
    while (at + 6 <= tokens.size() && !(tokens[at] == in[r * 5] && tokens[at + 1] == in[r * 5 + 1] &&
                                        tokens[at + 2] == in[r * 5 + 2])) {
      ++at;
    }
    ASSERT_LT(at + 5, tokens.size()) << "window " << r << " is not in the shard";
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(in[r * 5 + t], tokens[at + t]);
      EXPECT_EQ(tg[r * 5 + t], tokens[at + t + 1]);
    }
  }
}

// 32-bit shards (llm.c's Llama 3 header {20240801, 7}) hold ids of any vocabulary: Llama 3's 128,256 here.
TEST(TokenShardWriter, ThirtyTwoBitShardsHoldLargeVocabularies) {
  TempDir dir;
  const auto path = dir.file("wide.bin");
  std::mt19937 rng(11);
  std::vector<std::int32_t> ids(999);
  for (auto& t : ids) t = static_cast<std::int32_t>(rng() % 128256);
  ids[17] = 128255;
  write_llmc_shard(path, ids, 32);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 4 * ids.size());
  const TokenFile file(path, TokenFormat::kLlmc);
  EXPECT_EQ(file.bits(), 32);
  ASSERT_EQ(file.size(), static_cast<std::int64_t>(ids.size()));
  for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(file.at(static_cast<std::int64_t>(i)), ids[i]) << i;
  EXPECT_EQ(file.max_token(0, file.size()), (std::pair<std::int32_t, std::int64_t>{128255, 17}));
  // The loader reads it, and a vocabulary too small for it is refused naming the id.
  const auto config = [&](const char* vocab) {
    return config::parse_config("{}", "test", {"data.type=tokens", "data.path=" + path, "model.seq_len=5",
                                               std::string("model.vocab_size=") + vocab, "model.d_model=16",
                                               "model.n_heads=2"});
  };
  auto source = make_data_source(config("128256"), Split::kTrain);
  const Batch b = source->next_batch(0, 0, BatchLayout{2, 2, 0, 1}, cpu_allocator());
  EXPECT_GE(b.inputs.data<std::int32_t>()[0], 0);
  expect_error([&] { (void)make_data_source(config("65536"), Split::kTrain); }, {"wide.bin", "128255", "65536"});
  // The same ids as a 16-bit shard are refused, naming the id and the fix.
  expect_error([&] { write_llmc_shard(dir.file("narrow.bin"), ids, 16); }, {"narrow.bin", "does not fit", "32 bits"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("narrow.bin")));
  // Ids that fit 16 bits written as 16-bit shards have GPT-2's header.
  const std::vector<std::int32_t> small = {1, 2, 65535};
  write_llmc_shard(dir.file("small.bin"), small, 16);
  EXPECT_EQ(TokenFile(dir.file("small.bin"), TokenFormat::kLlmc).bits(), 16);
}

TEST(TokenShardWriter, RefusesAnExistingFileNoTokensAndAnUnwritablePath) {
  TempDir dir;
  const auto path = dir.file("train.bin");
  write_bytes(path, "keep", 4);
  try {
    write_llmc_shard(path, std::vector<std::uint16_t>{1, 2, 3});
    FAIL() << "an existing file was overwritten";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::filesystem::file_size(path), 4u);
  EXPECT_THROW(write_llmc_shard(dir.file("empty.bin"), std::vector<std::uint16_t>{}), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("empty.bin")));
  EXPECT_THROW(write_llmc_shard(dir.file("no/such/dir/x.bin"), std::vector<std::uint16_t>{1}), Error);
}

}  // namespace
}  // namespace cleave::train::token_shard_writer_test
