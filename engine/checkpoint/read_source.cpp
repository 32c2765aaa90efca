// The checkpoint a reader of one checkpoint reads, and its damage's message (read_source.hpp).
#include "engine/checkpoint/read_source.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "engine/checkpoint/quick_check.hpp"
#include "engine/checkpoint/resume_candidates.hpp"

namespace cleave::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789_./:=,@%+-") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::optional<ReadSource> resolve_read_source(const std::string& source) {
  if (fs::exists(fs::path(source) / "index.json")) return ReadSource{source, "", ""};
  for (const ResumeCandidate& c : scan_resume_candidates(source)) {
    if (c.state == CandidateState::kUnfinished) continue;
    return ReadSource{(fs::path(source) / c.name).string(), source,
                      c.state == CandidateState::kDamaged ? fmt::format("{}: {}", c.name, c.why) : std::string()};
  }
  return std::nullopt;
}

std::string command_with(const std::vector<std::string>& words, const std::string& from, const std::string& to) {
  std::string out;
  bool replaced = false;
  for (const std::string& w : words) {
    const bool here = !replaced && w == from;
    replaced = replaced || here;
    if (!out.empty()) out += ' ';
    out += shell_word(here ? to : w);
  }
  return out;
}

std::string damaged_newest_message(const ReadSource& source, const std::string& what,
                                   const std::vector<std::string>& words) {
  const std::string newest = fs::path(source.dir).filename().string();
  std::optional<std::string> older;
  bool past_newest = false;
  for (const ResumeCandidate& c : scan_resume_candidates(source.root)) {
    past_newest = past_newest || c.name == newest;
    if (!past_newest || c.name == newest || c.state != CandidateState::kUnchecked) continue;
    const std::string dir = (fs::path(source.root) / c.name).string();
    if (!quick_check(dir)) {
      older = dir;
      break;
    }
  }
  const std::string head = fmt::format("{}the newest checkpoint under {} is damaged: {}; nothing older was read in "
                                       "its place", words.size() > 1 ? words[1] + ": " : std::string(), source.root, what);
  if (!older) return head + " (no older checkpoint passes the quick check of index.json and the files' headers)";
  return fmt::format("{}. The newest older checkpoint that passes the quick check (index.json and the files' headers; "
                     "its tensor data is verified as it is read) is {}: {}",
                     head, *older, command_with(words, source.root, *older));
}

}  // namespace cleave::checkpoint
