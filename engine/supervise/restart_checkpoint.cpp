// The checkpoint a restart continues from (restart_checkpoint.hpp).
#include "engine/supervise/restart_checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/quick_check.hpp"
#include "engine/core/log.hpp"

namespace cleave::supervise {

namespace fs = std::filesystem;

RestartFrom restart_checkpoint(const std::string& root) {
  const std::vector<checkpoint::ResumeCandidate> candidates = checkpoint::quick_check_candidates(root);
  RestartFrom out;
  for (const checkpoint::ResumeCandidate& c : candidates) {
    if (c.state == checkpoint::CandidateState::kIntact) out.checkpoint = (fs::path(root) / c.name).string();
  }
  if (!out.checkpoint) {
    out.no_intact = checkpoint::no_intact_checkpoint_message("auto", root, candidates);
    return out;
  }
  const auto newest = checkpoint::latest_step_dir(root);
  if (newest && newest != out.checkpoint) {
    log::warn("run: the newest checkpoint {} is damaged ({}); the restart falls back to {}", *newest,
              checkpoint::quick_check(*newest).value_or("?"), *out.checkpoint);
  }
  return out;
}

std::int64_t checkpoint_step(const std::optional<std::string>& checkpoint) {
  return checkpoint ? std::stoll(fs::path(*checkpoint).filename().string().substr(5)) : 0;
}

void follow_fallback(RestartRecord& r, const std::string& ckpt_root, const std::string& records_dir,
                     const std::string& metrics_path) {
  const std::optional<std::int64_t> step = resumed_elsewhere(r, metrics_path);
  if (!step) return;
  log::warn("run: restart {} resumed from step {}, not {}: the trainer skipped a damaged checkpoint (its log says "
            "which and why)", r.number, *step, r.resumed_at_step);
  r.checkpoint = (fs::path(ckpt_root) / checkpoint::step_dir_name(*step)).string();
  r.resumed_at_step = *step;
  r.steps_redone = std::max<std::int64_t>(0, r.last_step_done - *step);
  const std::string rows = (fs::path(records_dir) / fmt::format("attempt_{}.metrics.jsonl", r.number)).string();
  r.redone_s = read_metrics_rows(rows).ms_after(*step) * 1e-3;
}

}  // namespace cleave::supervise
