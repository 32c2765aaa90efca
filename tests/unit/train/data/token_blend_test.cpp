// data.paths and data.weights (TokenBlendSource): windows never cross shards; sources are drawn in proportion to
// their weights (to within 4 standard deviations over 4,096 samples); one shard through data.paths gives
// exactly data.path's windows; samples do not depend on the dp layout; globs expand sorted and one matching
// nothing is refused; a manifest's vocabulary larger than model.vocab_size is refused; weights that do not
// sum to a positive number are refused; relative paths in a config file resolve against its directory.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "data_test_util.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/data/token_manifest.hpp"

namespace cleave::train::token_blend_test {
namespace {

using namespace test_util;

std::vector<std::uint16_t> run(std::uint16_t first, std::int64_t n) {
  std::vector<std::uint16_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(first + i);
  return t;
}

config::RunConfig blend_config(std::vector<std::string> sets) {
  sets.insert(sets.end(), {"data.type=tokens", "model.seq_len=8", "model.vocab_size=60000", "model.d_model=16",
                           "model.n_heads=2"});
  return config::parse_config("{}", "test", sets);
}

TEST(TokenBlend, WeightsPickSourcesAndWindowsStayInsideShards) {
  TempDir dir;
  // Source a: two shards of consecutive ids with a gap between them (a window crossing would jump); b: one.
  write_llmc(dir.file("a_0.bin"), run(0, 300));
  write_llmc(dir.file("a_1.bin"), run(1000, 300));
  write_llmc(dir.file("b.bin"), run(30000, 500));
  const auto c = blend_config({"data.paths=[\"" + dir.file("a_*.bin") + "\", \"" + dir.file("b.bin") + "\"]",
                               "data.weights=[3, 1]", "data.val_fraction=0.1"});
  auto train = make_data_source(c, Split::kTrain);
  EXPECT_NE(train->describe().find("2 shards"), std::string::npos) << train->describe();
  std::int64_t from_a = 0, rows = 0;
  for (int step = 0; step < 64; ++step) {
    const Batch b = train->next_batch(step, 0, BatchLayout{64, 64, 0, 1}, cpu_allocator());
    const auto* in = b.inputs.data<std::int32_t>();
    const auto* tg = b.targets.data<std::int32_t>();
    for (std::int64_t r = 0; r < 64; ++r, ++rows) {
      const std::int32_t o = in[r * 8];
      for (int t = 0; t < 8; ++t) {
        ASSERT_EQ(in[r * 8 + t], o + t);
        ASSERT_EQ(tg[r * 8 + t], o + t + 1);
      }
      // Train split: the first 270 tokens of each 300-token shard, the first 450 of b.
      const bool a0 = o + 8 < 270, a1 = o >= 1000 && o + 8 < 1270, b_ok = o >= 30000 && o + 8 < 30450;
      ASSERT_TRUE(a0 || a1 || b_ok) << "window at " << o;
      from_a += o < 30000;
    }
  }
  const double p = 0.75, sd = std::sqrt(p * (1 - p) / static_cast<double>(rows));
  EXPECT_NEAR(static_cast<double>(from_a) / static_cast<double>(rows), p, 4 * sd);
  // The eval split is the tail of each shard.
  auto eval = make_data_source(c, Split::kEval);
  const Batch e = eval->next_batch(0, 0, BatchLayout{32, 32, 0, 1}, cpu_allocator());
  for (std::int64_t r = 0; r < 32; ++r) {
    const std::int32_t o = e.inputs.data<std::int32_t>()[r * 8];
    EXPECT_TRUE((o >= 270 && o < 300) || (o >= 1270 && o < 1300) || (o >= 30450 && o < 30500)) << o;
  }
}

TEST(TokenBlend, OneShardThroughPathsIsDataPathAndLayoutDoesNotMatter) {
  TempDir dir;
  write_llmc(dir.file("s.bin"), position_tokens(5000));
  auto single = make_data_source(blend_config({"data.path=" + dir.file("s.bin")}), Split::kTrain);
  auto listed = make_data_source(blend_config({"data.paths=[\"" + dir.file("s.bin") + "\"]"}), Split::kTrain);
  for (int step = 0; step < 3; ++step) {
    const Batch a = single->next_batch(step, 0, BatchLayout{16, 16, 0, 1}, cpu_allocator());
    const Batch whole = listed->next_batch(step, 0, BatchLayout{16, 16, 0, 1}, cpu_allocator());
    ASSERT_EQ(a.inputs.numel(), whole.inputs.numel());
    for (std::int64_t i = 0; i < a.inputs.numel(); ++i) ASSERT_EQ(a.inputs.data<std::int32_t>()[i], whole.inputs.data<std::int32_t>()[i]);
    // dp 2 × micro-batch 4: rank r's micro-batch j is rows [8r + 4j, 8r + 4j + 4) of the global batch.
    for (int rank = 0; rank < 2; ++rank) {
      for (int mb = 0; mb < 2; ++mb) {
        const Batch part = listed->next_batch(step, mb, BatchLayout{16, 4, rank, 2}, cpu_allocator());
        for (std::int64_t i = 0; i < part.inputs.numel(); ++i) {
          ASSERT_EQ(part.inputs.data<std::int32_t>()[i], whole.inputs.data<std::int32_t>()[(8 * rank + 4 * mb) * 8 + i]);
        }
      }
    }
  }
}

TEST(TokenBlend, RefusesAnEmptyGlobBadWeightsAndATooLargeVocabulary) {
  TempDir dir;
  write_llmc(dir.file("s.bin"), position_tokens(500));
  expect_error([&] { (void)make_data_source(blend_config({"data.paths=[\"" + dir.file("s.bin") + "\", \"" +
                                                           dir.file("none_*.bin") + "\"]"}), Split::kTrain); },
               {"data.paths[1]", "none_*.bin", "matches no file"});
  expect_error([&] { (void)blend_config({"data.paths=[\"a.bin\", \"b.bin\"]", "data.weights=[0, 0]"}); },
               {"data.weights", "sum to 0", "positive"});
  expect_error([&] { (void)blend_config({"data.paths=[\"a.bin\", \"b.bin\"]", "data.weights=[1]"}); },
               {"data.weights", "1 entries", "data.paths has 2"});
  expect_error([&] { (void)blend_config({"data.paths=[\"a.bin\"]", "data.weights=[-1]"}); }, {"data.weights[0]"});
  // Both given: the message names the path to drop and how to clear it from the command line, where a config
  // file's data.path (every example has one) cannot be deleted: `--set data.path=` clears it, and then trains.
  expect_error([&] { (void)blend_config({"data.paths=[\"a.bin\"]", "data.path=b.bin"}); },
               {"data.paths", "data.path \"b.bin\"", "--set data.path="});
  EXPECT_TRUE(blend_config({"data.path=b.bin", "data.paths=[\"a.bin\"]", "data.path="}).data.path.empty());
  // A manifest (cleave tokenize's) saying the tokenizer has more ids than the model embeds.
  TokenManifest m;
  m.bits = 32;
  m.tokenizer = "/x/tokenizer.json";
  m.vocab_size = 128256;
  m.train = {{"s.bin", 500}};
  write_token_manifest(dir.file("manifest.json"), m);
  expect_error([&] { (void)make_data_source(blend_config({"data.paths=[\"" + dir.file("*.bin") + "\"]"}), Split::kTrain); },
               {"s.bin", "128256", "manifest.json", "model.vocab_size is 60000"});
  expect_error([&] { (void)make_data_source(blend_config({"data.path=" + dir.file("s.bin")}), Split::kTrain); },
               {"s.bin", "128256"});
}

TEST(TokenBlend, RelativePathsInAConfigFileResolveAgainstItsDirectory) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "conf");
  std::filesystem::create_directories(dir.path() / "shards");
  write_llmc(dir.file("shards/t_0.bin"), position_tokens(500));
  const std::string config = dir.file("conf/run.json");
  std::ofstream(config) << R"({"model": {"seq_len": 8, "vocab_size": 60000, "d_model": 16, "n_heads": 2},
    "data": {"type": "tokens", "paths": ["../shards/t_*.bin"], "val_path": "../shards/t_0.bin"}})";
  const auto c = config::load_config(config);
  EXPECT_EQ(c.data.paths, std::vector<std::string>{(dir.path() / "shards/t_*.bin").string()});
  EXPECT_EQ(c.data.val_path, (dir.path() / "shards/t_0.bin").string());
  EXPECT_NO_THROW((void)make_data_source(c, Split::kTrain));
  // A --set value is a command-line value: relative to the working directory, made absolute so the run's config.json
  // names the same file from anywhere.
  const auto set = config::load_config(config, {"data.val_path=rel/v.bin"});
  EXPECT_EQ(set.data.val_path, (std::filesystem::current_path() / "rel/v.bin").string());
}

// The run's config.json (config::to_json of the loaded config) trained from another directory reads the same files:
// relative paths from the file, from --set and digits' default are all absolute in it. Before, a --set path and the
// default stayed relative and so resolved against the run directory when that file was trained.
TEST(TokenBlend, TheRunsConfigJsonNamesTheSameFilesFromAnywhere) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "conf");
  std::filesystem::create_directories(dir.path() / "run");
  const std::string config = dir.file("conf/run.json");
  std::ofstream(config) << R"({"model": {"seq_len": 8, "vocab_size": 60000, "d_model": 16, "n_heads": 2},
    "data": {"type": "tokens", "paths": ["../shards/t_*.bin"]}})";
  const auto c = config::load_config(config, {"data.val_path=rel/v.bin"});
  const std::string saved = dir.file("run/config.json");
  std::ofstream(saved) << config::to_json(c);
  const auto again = config::load_config(saved);
  EXPECT_EQ(again.data.paths, std::vector<std::string>{(dir.path() / "shards/t_*.bin").string()});
  EXPECT_EQ(again.data.val_path, (std::filesystem::current_path() / "rel/v.bin").string());
  EXPECT_EQ(again.data, c.data);
  // digits' default data/digits.csv.gz: the working directory's, absolute, also after the round trip.
  const auto digits = config::load_config("", {"model.type=mlp", "data.type=digits"});
  EXPECT_EQ(digits.data.path, (std::filesystem::current_path() / "data/digits.csv.gz").string());
  std::ofstream(saved) << config::to_json(digits);
  EXPECT_EQ(config::load_config(saved).data.path, digits.data.path);
}

}  // namespace
}  // namespace cleave::train::token_blend_test
