// Resuming from the newest intact checkpoint (resume_fallback.hpp).
#include "engine/train/checkpoint/resume_fallback.hpp"

#include <filesystem>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/resume_candidates.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/checkpoint/checkpoint_io.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/checkpoint/resume.hpp"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::CandidateState;
using checkpoint::ResumeCandidate;

// The config check, then the load: both collective, CheckpointDamage on every rank when any rank found damage.
ResumedFrom load(const RunParts& run, const std::string& dir, const std::vector<std::string>& allowed) {
  ResumedFrom out{dir, 0, {}};
  out.changes = check_resumed_config(run.setup, dir, allowed);
  out.step = load_checkpoint(run.setup, run.model, run.tail, dir, /*continue_run=*/true);
  return out;
}

// "step_0000020" of "runs/x/checkpoints/step_0000020" when it is one (a trailing '/' allowed).
std::string step_name(const std::string& dir) {
  fs::path p(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// A step directory (one checkpoint) rather than a root holding them.
bool is_step_dir(const std::string& dir) {
  return fs::exists(fs::path(dir) / "index.json") || step_name(dir).starts_with("step_");
}

constexpr const char* kResumeFix =
    "give a checkpoint's step_NNNNNNN directory, a directory holding them (checkpoint.dir), or --resume auto";

// After a fallback: the damaged checkpoints skipped are renamed out of the way (rank 0), `latest` names the one
// loaded, and each skip is logged once. Collective (rank 0's error is every rank's).
void set_aside(RankSetup& s, const std::string& root, const std::vector<ResumeCandidate>& candidates,
               const checkpoint::ResumePick& pick) {
  RankFailure failure;
  if (s.reports()) {
    try {
      for (const std::size_t i : pick.skipped) {
        const ResumeCandidate& c = candidates[i];
        if (c.state == CandidateState::kUnfinished) {
          log::info("checkpoint: --resume skipped {} (step {}): {}", c.name, c.step, c.why);
          continue;
        }
        const std::string kept = checkpoint::set_aside_damaged(root, c.name);
        log::warn("checkpoint: --resume skipped {} (step {}), damaged: {}; kept unchanged as {}", c.name, c.step, c.why,
                  kept);
      }
      checkpoint::point_latest(root, candidates[*pick.next].name);
    } catch (const std::exception& e) {
      failure = rank_failure(e);
    }
  }
  throw_if_any_rank_failed(s.world, failure);
}

// The newest intact checkpoint under `root` loaded (resume_candidates.hpp's order), or none when it holds none.
std::optional<ResumedFrom> newest_intact(const RunParts& run, const std::string& root, const std::string& asked,
                                         const std::vector<std::string>& allowed) {
  std::vector<ResumeCandidate> candidates = checkpoint::scan_resume_candidates(root);
  for (;;) {
    const checkpoint::ResumePick pick = checkpoint::pick_resume(candidates);
    if (!pick.next) {
      const auto message = checkpoint::no_intact_checkpoint_message(asked, root, candidates);
      if (message) throw checkpoint::NoIntactCheckpoint(*message);
      return std::nullopt;
    }
    ResumeCandidate& c = candidates[*pick.next];
    const std::string dir = (fs::path(root) / c.name).string();
    try {
      ResumedFrom loaded = load(run, dir, allowed);
      c.state = CandidateState::kIntact;
      if (!pick.skipped.empty()) set_aside(run.setup, root, candidates, pick);
      return loaded;
    } catch (const checkpoint::CheckpointDamage& e) {
      c.state = CandidateState::kDamaged;
      c.why = e.what();
    }
  }
}

}  // namespace

std::optional<ResumedFrom> resume_from_checkpoint(const RunParts& run, const std::string& resume,
                                                  const std::string& checkpoint_root,
                                                  const std::vector<std::string>& allowed) {
  std::optional<ResumedFrom> out;
  if (resume == kResumeAuto) {
    out = newest_intact(run, checkpoint_root, resume, allowed);
    if (!out && run.setup.reports()) {
      log::info("checkpoint: --resume auto found no checkpoint under {}; starting fresh", checkpoint_root);
    }
    return out;
  }
  check_resume_argument(resume);
  if (!is_step_dir(resume)) {
    out = newest_intact(run, resume, resume, allowed);
    CLEAVE_CHECK_INPUT(out.has_value(), "--resume {}: holds no complete checkpoint (no index.json, no step_NNNNNNN/); {}",
                       resume, kResumeFix);
    return out;
  }
  try {
    return load(run, resume, allowed);
  } catch (const checkpoint::CheckpointDamage& e) {
    throw checkpoint::CheckpointDamage(fmt::format(
        "--resume {}: the checkpoint is damaged: {}; nothing was loaded or written (resume an earlier checkpoint, "
        "or --resume auto, which falls back to the newest intact one)", resume, e.what()));
  }
}

void check_resume_argument(const std::string& resume) {
  if (resume.empty() || resume == kResumeAuto) return;
  CLEAVE_CHECK_INPUT(fs::is_directory(resume), "--resume {}: no such checkpoint directory; {}", resume, kResumeFix);
  const fs::path checkpoints = fs::path(resume) / "checkpoints";
  const std::string run_dir = fs::is_directory(checkpoints)
                                  ? fmt::format("; a run directory keeps its checkpoints in {}", checkpoints.string())
                                  : std::string();
  CLEAVE_CHECK_INPUT(is_step_dir(resume) || !checkpoint::scan_resume_candidates(resume).empty(),
                     "--resume {}: holds no checkpoint (no index.json, no step_NNNNNNN/){}; {}", resume, run_dir,
                     kResumeFix);
}

bool resume_continues_a_run(const std::string& resume, const std::string& checkpoint_root) {
  if (resume.empty()) return false;
  if (resume != kResumeAuto) return true;
  for (const ResumeCandidate& c : checkpoint::scan_resume_candidates(checkpoint_root)) {
    if (c.state != CandidateState::kUnfinished) return true;
  }
  return false;
}

}  // namespace cleave::train
