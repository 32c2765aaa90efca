// CheckpointReader against a hand-made checkpoint directory: tp shards (with fused-QKV groups) and ZeRO-1
// segments assemble into the logical tensor; a damaged index.json is refused before anything the size of its
// numbers is allocated (a shape of 2^40 elements covered by 6 is an Error, not a 4 TB std::vector); a piece
// whose bytes in the file disagree with index.json names the file, both tensors and the numbers.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/error.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"

namespace cleave::train::checkpoint_reader_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

json piece(const std::string& name, int dim, int parts, int index, int groups, std::int64_t begin, std::int64_t end) {
  return {{"file", "rank_00000.safetensors"}, {"name", name}, {"dim", dim}, {"parts", parts}, {"index", index},
          {"groups", groups}, {"begin", begin}, {"end", end}};
}

// One file holding w [4,3] as two tp shards along dim 0 (rows 0-1, rows 2-3; shard 1 in two ZeRO segments) and
// qkv [6,1] split in 3 groups over tp 2 (shard 0 holds logical rows 0, 2, 4).
class Checkpoint {
 public:
  Checkpoint() : dir_(fs::temp_directory_path() / ("cleave_reader_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const auto bytes = [](const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); };
    const auto written = checkpoint::write_safetensors(
        (dir_ / "rank_00000.safetensors").string(),
        {{"w.0", "F32", {6}, bytes(w0_)}, {"w.1@0", "F32", {2}, bytes(w1a_)}, {"w.1@2", "F32", {4}, bytes(w1b_)},
         {"qkv.0", "F32", {3}, bytes(q0_)}, {"qkv.1", "F32", {3}, bytes(q1_)}});
    index_ = {{"format", "cleave-checkpoint"}, {"version", 1}, {"step", 2}, {"model", json::object()},
              {"optimizer", {{"type", "sgd"}, {"steps_done", 2}}},
              {"files", {{"rank_00000.safetensors", {{"bytes", written.bytes},
                                                     {"checksum", checkpoint::checksum_text(written.checksum)}}}}},
              {"tensors",
               {{"w", {{"kind", "parameter"}, {"shape", {4, 3}}, {"dtype", "F32"},
                       {"pieces", {piece("w.0", 0, 2, 0, 1, 0, 6), piece("w.1@2", 0, 2, 1, 1, 2, 6),
                                   piece("w.1@0", 0, 2, 1, 1, 0, 2)}}}},
                {"qkv", {{"kind", "parameter"}, {"shape", {6, 1}}, {"dtype", "F32"},
                         {"pieces", {piece("qkv.0", 0, 2, 0, 3, 0, 3), piece("qkv.1", 0, 2, 1, 3, 0, 3)}}}}}}};
  }
  ~Checkpoint() { fs::remove_all(dir_); }

  // Writes index.json (after `change`) and opens the directory.
  CheckpointReader open(const std::function<void(json&)>& change = {}) {
    json index = index_;
    if (change) change(index);
    std::ofstream(dir_ / "index.json") << index.dump(1);
    return CheckpointReader(dir_.string());
  }

 private:
  fs::path dir_;
  json index_;
  std::vector<float> w0_{0, 1, 2, 3, 4, 5}, w1a_{6, 7}, w1b_{8, 9, 10, 11};
  std::vector<float> q0_{0.5f, 2.5f, 4.5f}, q1_{1.5f, 3.5f, 5.5f};
};

TEST(CheckpointReader, ShardsAndSegmentsAssembleTheLogicalTensor) {
  Checkpoint ck;
  CheckpointReader reader = ck.open();
  EXPECT_EQ(reader.parameter_names(), (std::vector<std::string>{"qkv", "w"}));
  EXPECT_EQ(reader.shape_of("w"), (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(reader.logical("w"), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(reader.logical("qkv"), (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
  EXPECT_GT(reader.bytes_read(), 0);
}

TEST(CheckpointReader, CoverageIsCheckedBeforeAllocating) {
  Checkpoint ck;
  // 2^40 elements claimed, 6 + 6 stored: an Error from index.json alone, not a 4 TB allocation.
  CheckpointReader huge = ck.open([](json& j) { j["tensors"]["w"]["shape"] = {std::int64_t{1} << 40, 1}; });
  std::string m = error_of([&] { (void)huge.logical("w"); });
  EXPECT_NE(m.find("tensor w shard 0: pieces cover 6 of 549755813888 elements"), std::string::npos) << m;
  EXPECT_EQ(huge.bytes_read(), 0);  // not even the file was read
  // A gap inside a shard.
  CheckpointReader gap = ck.open([](json& j) { j["tensors"]["w"]["pieces"][1]["begin"] = 3; });
  m = error_of([&] { (void)gap.logical("w"); });
  EXPECT_NE(m.find("tensor w shard 1: piece w.1@2 in rank_00000.safetensors covers [3, 6), expected to start at 2"),
            std::string::npos) << m;
  // Pieces of one shard that disagree about how it was split.
  CheckpointReader split = ck.open([](json& j) { j["tensors"]["w"]["pieces"][2]["groups"] = 2; });
  m = error_of([&] { (void)split.logical("w"); });
  EXPECT_NE(m.find("tensor w shard 1: pieces split along dim 0 in 1 groups and dim 0 in 2 groups"), std::string::npos)
      << m;
}

TEST(CheckpointReader, PieceBytesMustMatchTheIndex) {
  Checkpoint ck;
  // Shard 1 re-cut as [0, 4) + [4, 6): both pieces still cover the shard, but w.1@0 holds 2 elements, not 4.
  CheckpointReader reader = ck.open([](json& j) {
    j["tensors"]["w"]["pieces"][2]["end"] = 4;
    j["tensors"]["w"]["pieces"][1]["begin"] = 4;
  });
  const std::string m = error_of([&] { (void)reader.logical("w"); });
  EXPECT_NE(m.find("rank_00000.safetensors: tensor w.1@0 (w) holds 8 bytes, index.json says 4 f32 elements"),
            std::string::npos) << m;
}

}  // namespace
}  // namespace cleave::train::checkpoint_reader_test
