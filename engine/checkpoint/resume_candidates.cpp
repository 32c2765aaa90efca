// Resume candidates and the pick among them (resume_candidates.hpp).
#include "engine/checkpoint/resume_candidates.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace cleave::checkpoint {
namespace {

namespace fs = std::filesystem;

// The step of "step_NNNNNNN" (after `prefix`), else nothing.
std::optional<std::int64_t> step_of(const std::string& name, const std::string& prefix) {
  if (name.size() != prefix.size() + 12 || !name.starts_with(prefix + "step_")) return std::nullopt;
  std::int64_t step = 0;
  for (std::size_t i = prefix.size() + 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::vector<ResumeCandidate> order_resume_candidates(const std::vector<RootEntry>& entries, const std::string& latest) {
  std::optional<std::int64_t> newest;  // the pointer's step, when it names a checkpoint that has index.json
  for (const RootEntry& e : entries) {
    if (e.name == latest && e.has_index && step_of(e.name, "")) newest = step_of(e.name, "");
  }
  std::vector<ResumeCandidate> out;
  for (const RootEntry& e : entries) {
    if (const auto step = step_of(e.name, "")) {
      if (newest && *step > *newest) continue;  // a branch the run left
      ResumeCandidate c{e.name, *step, CandidateState::kUnchecked, ""};
      if (!e.has_index) {
        c.state = CandidateState::kDamaged;
        c.why = "no index.json (a save renames its directory into place only after writing index.json: the file "
                "was removed or lost since)";
      }
      out.push_back(std::move(c));
    } else if (const auto tmp = step_of(e.name, ".tmp-")) {
      out.push_back({e.name, *tmp, CandidateState::kUnfinished,
                     "an unfinished save (a crash during the save leaves it; the next save of that step replaces it)"});
    }
  }
  // Newest step first; at one step the checkpoint before the unfinished save of it.
  std::stable_sort(out.begin(), out.end(), [](const ResumeCandidate& a, const ResumeCandidate& b) {
    if (a.step != b.step) return a.step > b.step;
    return a.state != CandidateState::kUnfinished && b.state == CandidateState::kUnfinished;
  });
  return out;
}

ResumePick pick_resume(const std::vector<ResumeCandidate>& candidates) {
  ResumePick pick;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const CandidateState state = candidates[i].state;
    if (state == CandidateState::kDamaged || state == CandidateState::kUnfinished) {
      pick.skipped.push_back(i);
      continue;
    }
    pick.next = i;
    return pick;
  }
  return pick;
}

std::vector<ResumeCandidate> scan_resume_candidates(const std::string& root) {
  std::vector<RootEntry> entries;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    entries.push_back({entry.path().filename().string(), fs::exists(entry.path() / "index.json", ec)});
  }
  std::string latest;
  std::ifstream pointer(fs::path(root) / "latest");
  if (pointer) std::getline(pointer, latest);
  return order_resume_candidates(entries, latest);
}

std::optional<std::string> no_intact_checkpoint_message(const std::string& asked, const std::string& root,
                                                        const std::vector<ResumeCandidate>& candidates) {
  if (pick_resume(candidates).next) return std::nullopt;
  std::string damaged;
  for (const ResumeCandidate& c : candidates) {
    if (c.state != CandidateState::kDamaged) continue;
    damaged += fmt::format("{}{} (step {}): {}", damaged.empty() ? "" : "; ", c.name, c.step, c.why);
  }
  if (damaged.empty()) return std::nullopt;
  return fmt::format("--resume {}: no intact checkpoint under {}: {}; nothing was loaded, renamed or written. Restore "
                     "a checkpoint's files, or start a fresh run in another train.out_dir",
                     asked, root, damaged);
}

std::string damaged_name(const std::string& name, const std::vector<std::string>& taken) {
  const std::string base = "damaged-" + name;
  std::string out = base;
  for (int n = 2; std::find(taken.begin(), taken.end(), out) != taken.end(); ++n) out = base + "." + std::to_string(n);
  return out;
}

}  // namespace cleave::checkpoint
