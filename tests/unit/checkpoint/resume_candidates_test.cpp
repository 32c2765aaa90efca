// Which checkpoint --resume auto tries, in which order, and the pick once some are found damaged
// (engine/checkpoint/resume_candidates.hpp): pure functions over a directory listing, the latest pointer and the
// verdicts; and the rename that keeps a damaged checkpoint (checkpoint_dir.hpp: set_aside_damaged).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/resume_candidates.hpp"

namespace cleave::checkpoint::resume_candidates_test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(const std::vector<ResumeCandidate>& c) {
  std::vector<std::string> out;
  for (const auto& x : c) out.push_back(x.name);
  return out;
}

TEST(ResumeCandidates, NewestFirstFromTheLatestPointer) {
  const std::vector<RootEntry> entries = {{"step_0000010", true}, {"step_0000030", true}, {"step_0000020", true},
                                          {"latest", false},      {"damaged-step_0000040", true}, {"notes", false}};
  // Without a pointer: every checkpoint, newest first; other names ignored.
  EXPECT_EQ(names(order_resume_candidates(entries, "")),
            (std::vector<std::string>{"step_0000030", "step_0000020", "step_0000010"}));
  // The pointer names step 20: step 30 is a branch the run left (it resumed from 20 by hand), never tried.
  EXPECT_EQ(names(order_resume_candidates(entries, "step_0000020")),
            (std::vector<std::string>{"step_0000020", "step_0000010"}));
  // A pointer to a directory that is gone (or without index.json) counts as none.
  EXPECT_EQ(names(order_resume_candidates(entries, "step_0000099")).front(), "step_0000030");
}

TEST(ResumeCandidates, MissingMarkerIsDamageAndUnfinishedSavesAreNotes) {
  const auto c = order_resume_candidates(
      {{"step_0000010", true}, {"step_0000020", false}, {".tmp-step_0000030", false}, {".tmp-step_0000010", false}}, "");
  ASSERT_EQ(names(c), (std::vector<std::string>{".tmp-step_0000030", "step_0000020", "step_0000010", ".tmp-step_0000010"}));
  EXPECT_EQ(c[0].state, CandidateState::kUnfinished);
  EXPECT_EQ(c[0].step, 30);
  EXPECT_EQ(c[1].state, CandidateState::kDamaged);
  EXPECT_NE(c[1].why.find("no index.json"), std::string::npos) << c[1].why;
  EXPECT_EQ(c[2].state, CandidateState::kUnchecked);
  // The first candidate not known damaged, with everything newer reported as skipped.
  const ResumePick pick = pick_resume(c);
  ASSERT_TRUE(pick.next.has_value());
  EXPECT_EQ(*pick.next, 2u);
  EXPECT_EQ(pick.skipped, (std::vector<std::size_t>{0, 1}));
}

TEST(ResumeCandidates, FallsBackOneVerdictAtATime) {
  auto c = order_resume_candidates({{"step_0000005", true}, {"step_0000010", true}, {"step_0000015", true}}, "step_0000015");
  EXPECT_EQ(*pick_resume(c).next, 0u);  // nothing known yet: the newest
  c[0].state = CandidateState::kDamaged;
  c[0].why = "checksum";
  ResumePick pick = pick_resume(c);
  EXPECT_EQ(*pick.next, 1u);
  EXPECT_EQ(pick.skipped, (std::vector<std::size_t>{0}));
  c[1].state = CandidateState::kIntact;  // loaded: the pick stays
  EXPECT_EQ(*pick_resume(c).next, 1u);
  c[1].state = CandidateState::kDamaged;
  c[2].state = CandidateState::kDamaged;
  pick = pick_resume(c);  // every one damaged: no pick, all three skipped (the caller's error lists them)
  EXPECT_FALSE(pick.next.has_value());
  EXPECT_EQ(pick.skipped.size(), 3u);
  // Nothing at all (a fresh run): no pick and nothing skipped.
  EXPECT_FALSE(pick_resume({}).next.has_value());
  EXPECT_TRUE(pick_resume({}).skipped.empty());
}

TEST(ResumeCandidates, DamagedNameNeverReusesOne) {
  EXPECT_EQ(damaged_name("step_0000020", {}), "damaged-step_0000020");
  EXPECT_EQ(damaged_name("step_0000020", {"damaged-step_0000020"}), "damaged-step_0000020.2");
  EXPECT_EQ(damaged_name("step_0000020", {"damaged-step_0000020", "damaged-step_0000020.2"}), "damaged-step_0000020.3");
}

TEST(ResumeCandidates, SetAsideKeepsTheFilesOutOfReach) {
  const fs::path root = fs::temp_directory_path() / ("cleave_set_aside_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* step : {"step_0000010", "step_0000020"}) {
    fs::create_directories(root / step);
    std::ofstream(root / step / "index.json") << "{}";
  }
  std::ofstream(root / "step_0000020" / "rank_00000.safetensors") << "bytes";
  const std::string kept = set_aside_damaged(root.string(), "step_0000020");
  EXPECT_EQ(kept, (root / "damaged-step_0000020").string());
  EXPECT_TRUE(fs::exists(root / "damaged-step_0000020" / "rank_00000.safetensors"));
  // Neither a candidate nor pruned: only step 10 is a checkpoint now, and keep_last 1 leaves it all alone.
  EXPECT_EQ(names(scan_resume_candidates(root.string())), (std::vector<std::string>{"step_0000010"}));
  EXPECT_EQ(prune_step_dirs(root.string(), 1), 0);
  EXPECT_TRUE(fs::exists(root / "damaged-step_0000020"));
  // A second damaged copy of the same step gets its own name.
  fs::create_directories(root / "step_0000020");
  EXPECT_EQ(set_aside_damaged(root.string(), "step_0000020"), (root / "damaged-step_0000020.2").string());
  fs::remove_all(root);
}

}  // namespace
}  // namespace cleave::checkpoint::resume_candidates_test
