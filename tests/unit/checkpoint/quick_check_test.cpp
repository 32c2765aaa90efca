// The quick check `cleave run` takes to name a restart's checkpoint (engine/checkpoint/quick_check.hpp): a sealed
// checkpoint written here passes; a flipped header byte, a cut or missing file and a changed index.json each fail
// with a message naming the file, and the newest passing checkpoint is the one before. A flipped bit inside tensor
// data passes (only the load's chunk checks see it: tests/e2e/checkpoint_damage.sh).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/quick_check.hpp"
#include "engine/checkpoint/safetensors.hpp"

namespace cleave::checkpoint::quick_check_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A one-tensor checkpoint `root`/`name` as the trainer writes one (sealed index, header checksum).
void write_checkpoint(const fs::path& root, const std::string& name) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  const std::vector<float> w(64, 0.5f);
  const WrittenFile f = write_safetensors((dir / "rank_00000.safetensors").string(),
                                          {{"w", "F32", {64}, std::as_bytes(std::span<const float>(w))}});
  json index = {{"format", "cleave-checkpoint"}, {"version", kCheckpointFormatVersion}, {"step", 1},
                {"model", json::object()}, {"optimizer", {{"type", "adamw"}, {"steps_done", 1}}},
                {"files", {{"rank_00000.safetensors", {{"bytes", f.bytes}, {"checksum", checksum_text(f.checksum)},
                                                      {"header_checksum", checksum_text(f.header_checksum)}}}}},
                {"tensors", {{"w", {{"kind", "parameter"}, {"shape", {64}}, {"dtype", "F32"},
                                    {"pieces", {{{"file", "rank_00000.safetensors"}, {"name", "w"}, {"dim", -1},
                                                 {"parts", 1}, {"index", 0}, {"groups", 1}, {"begin", 0},
                                                 {"end", 64}}}}}}}}};
  seal_index(index);
  std::ofstream(dir / "index.json") << index.dump(1);
}

void flip_byte(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 1));
}

class QuickCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cleave_quick_check_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    write_checkpoint(root_, "step_0000001");
    write_checkpoint(root_, "step_0000002");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path newest() const { return root_ / "step_0000002"; }
  std::string damage() const { return quick_check(newest().string()).value_or("(passed)"); }
  fs::path root_;
};

TEST_F(QuickCheck, IntactPasses) {
  EXPECT_FALSE(quick_check(newest().string()).has_value());
  EXPECT_EQ(newest_passing_quick_check(root_.string()), newest().string());
}

TEST_F(QuickCheck, EachDamageNamesTheFileAndTheOneBeforeIsPicked) {
  const fs::path file = newest() / "rank_00000.safetensors";
  flip_byte(file, 20);  // inside the JSON header
  EXPECT_NE(damage().find("rank_00000.safetensors: checksum"), std::string::npos) << damage();
  EXPECT_EQ(newest_passing_quick_check(root_.string()), (root_ / "step_0000001").string());
  flip_byte(file, 20);
  fs::resize_file(file, fs::file_size(file) - 4);
  EXPECT_NE(damage().find("(truncated or replaced)"), std::string::npos) << damage();
  fs::remove(file);
  EXPECT_NE(damage().find("rank_00000.safetensors is missing"), std::string::npos) << damage();
  write_checkpoint(root_, "step_0000002");
  flip_byte(newest() / "index.json", 30);
  EXPECT_NE(damage().find("index.json"), std::string::npos) << damage();
  fs::remove(newest() / "index.json");
  EXPECT_NE(damage().find("no index.json"), std::string::npos) << damage();
}

TEST_F(QuickCheck, EveryCheckpointDamagedGivesTheTrainersNoIntactMessage) {
  fs::resize_file(newest() / "rank_00000.safetensors", 10);
  fs::remove(root_ / "step_0000001" / "rank_00000.safetensors");
  const std::vector<ResumeCandidate> candidates = quick_check_candidates(root_.string());
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0].state, CandidateState::kDamaged);
  EXPECT_EQ(candidates[1].state, CandidateState::kDamaged);
  EXPECT_FALSE(newest_passing_quick_check(root_.string()).has_value());
  const std::optional<std::string> message = no_intact_checkpoint_message("auto", root_.string(), candidates);
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->find("--resume auto: no intact checkpoint under " + root_.string() + ": step_0000002 (step 2): "),
            0u) << *message;
  EXPECT_NE(message->find("; step_0000001 (step 1): "), std::string::npos) << *message;
  EXPECT_NE(message->find("rank_00000.safetensors is missing"), std::string::npos) << *message;
  // One intact: it is the pick, the checks stop there, and there is no message.
  write_checkpoint(root_, "step_0000001");
  const std::vector<ResumeCandidate> one = quick_check_candidates(root_.string());
  EXPECT_EQ(one[1].state, CandidateState::kIntact);
  EXPECT_FALSE(no_intact_checkpoint_message("auto", root_.string(), one).has_value());
}

TEST_F(QuickCheck, TensorDataIsNotRead) {
  const fs::path file = newest() / "rank_00000.safetensors";
  flip_byte(file, static_cast<std::streamoff>(fs::file_size(file)) - 8);  // the tensor's bytes
  EXPECT_FALSE(quick_check(newest().string()).has_value());
}

}  // namespace
}  // namespace cleave::checkpoint::quick_check_test
