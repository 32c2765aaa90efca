// quick_check (quick_check.hpp).
#include "engine/checkpoint/quick_check.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/resume_candidates.hpp"
#include "engine/checkpoint/safetensors.hpp"

namespace cleave::checkpoint {
namespace {

namespace fs = std::filesystem;

void check(const std::string& step_dir) {
  const fs::path index_path = fs::path(step_dir) / "index.json";
  std::ifstream in(index_path, std::ios::binary);
  CLEAVE_CHECK_INTACT(in.good(), "checkpoint {}: no index.json", step_dir);
  std::stringstream text;
  text << in.rdbuf();
  check_checkpoint_files(step_dir, parse_checkpoint_index(text.str(), index_path.string()));
}

}  // namespace

void check_checkpoint_files(const std::string& step_dir, const CheckpointIndex& index) {
  std::map<std::string, std::string> holds;  // file -> " (it holds tensor X)", the first tensor placed in it
  for (const auto& [tensor, entry] : index.tensors) {
    for (const IndexPiece& piece : entry.pieces) holds.emplace(piece.file, fmt::format(" (it holds tensor {})", tensor));
  }
  for (const auto& [name, file] : index.files) {
    const std::string path = (fs::path(step_dir) / name).string();
    const std::string& what = holds[name];
    std::error_code ec;
    CLEAVE_CHECK_INTACT(fs::is_regular_file(path, ec), "checkpoint file {} is missing{}", path, what);
    const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
    CLEAVE_CHECK_INTACT(size == file.bytes, "checkpoint file {} has {} bytes, index.json records {} (truncated or "
                        "replaced){}", path, size, file.bytes, what);
    if (!file.header_checksum) continue;  // an older checkpoint: its files are checked whole when read
    try {
      (void)read_safetensors_header(path, file.header_checksum);
    } catch (const Error& e) {
      throw CheckpointDamage(fmt::format("{}{}", e.what(), what));
    }
  }
}

std::optional<std::string> quick_check(const std::string& step_dir) {
  try {
    check(step_dir);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

std::vector<ResumeCandidate> quick_check_candidates(const std::string& root) {
  std::vector<ResumeCandidate> candidates = scan_resume_candidates(root);
  for (ResumeCandidate& c : candidates) {
    if (c.state != CandidateState::kUnchecked) continue;
    const std::optional<std::string> why = quick_check((fs::path(root) / c.name).string());
    if (!why) {
      c.state = CandidateState::kIntact;
      break;
    }
    c.state = CandidateState::kDamaged;
    c.why = *why;
  }
  return candidates;
}

std::optional<std::string> newest_passing_quick_check(const std::string& root) {
  for (const ResumeCandidate& c : quick_check_candidates(root)) {
    if (c.state == CandidateState::kIntact) return (fs::path(root) / c.name).string();
  }
  return std::nullopt;
}

}  // namespace cleave::checkpoint
