// Which checkpoint a reader of one checkpoint (`cleave export`, `cleave generate`) reads when given SOURCE, and what
// it says when that one is damaged.
//
// Rules: SOURCE holding index.json is that checkpoint. Otherwise SOURCE is a checkpoint root and the reader reads its
// newest checkpoint: the first of resume_candidates.hpp's order that is not an unfinished save (the one `latest`
// names, else the newest step), also when that one is damaged (a step directory without index.json included).
// Damage is an error that names the newest older checkpoint passing the quick check (quick_check.hpp) and the
// command that reads it: the same words with SOURCE replaced by that directory.
// Invariant: a reader never reads another step than the one it was asked for (export or generate of an older
// step than the newest would be a surprise): it only suggests. Nothing here writes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_damage.hpp"

namespace cleave::checkpoint {

struct ReadSource {
  std::string dir;      // the step directory to read
  std::string root;     // SOURCE when it is a checkpoint root, else ""
  std::string damaged;  // what is already known wrong with `dir` (no index.json), else ""
};

// The checkpoint SOURCE names (above); nothing when SOURCE holds neither index.json nor a step directory.
std::optional<ReadSource> resolve_read_source(const std::string& source);

// `words` as one shell command line, the first word equal to `from` replaced by `to`; a word with characters a
// shell reads specially is single-quoted. Pure.
std::string command_with(const std::vector<std::string>& words, const std::string& from, const std::string& to);

// The error for a damaged newest checkpoint `source.dir` under `source.root` (`what`: the damage): the newest older
// checkpoint that passes the quick check and `words` (the command as given, SOURCE its word) reading it instead.
std::string damaged_newest_message(const ReadSource& source, const std::string& what,
                                   const std::vector<std::string>& words);

// Runs `read` (which reads source.dir); damage of a root's newest checkpoint becomes damaged_newest_message's
// CheckpointDamage. A step directory given by name keeps the reader's own error.
template <class Read>
auto read_newest(const ReadSource& source, const std::vector<std::string>& words, Read&& read) {
  if (!source.damaged.empty()) throw CheckpointDamage(damaged_newest_message(source, source.damaged, words));
  try {
    return read();
  } catch (const CheckpointDamage& e) {
    if (source.root.empty()) throw;
    throw CheckpointDamage(damaged_newest_message(source, e.what(), words));
  }
}

}  // namespace cleave::checkpoint
