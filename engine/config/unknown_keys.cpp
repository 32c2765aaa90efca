// Unknown config keys: every one in one error line, each with the closest known key. See unknown_keys.hpp.
#include "engine/config/unknown_keys.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <string_view>
#include <vector>

#include "engine/config/peer_key_names.hpp"
#include "engine/core/edit_distance.hpp"

namespace cleave::config {
namespace {

std::string_view leaf_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string_view parent_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

// " (did you mean K? LEAF is another trainer's name for it)" for a Megatron-LM / torchtitan / Hugging Face name
// (peer_key_names.hpp); else " (did you mean K?)" for the nearest known key within an edit distance of a third of
// the key's leaf (at least 2); else " (known keys in SECTION: ...)"; else nothing.
std::string suggest(const std::string& unknown, const std::set<std::string>& known) {
  const std::string_view leaf = leaf_of(unknown);
  if (const auto peer = peer_key_name(unknown, known)) {
    return fmt::format(" (did you mean {}? {} is the Megatron-LM / torchtitan / Hugging Face name)", *peer, leaf);
  }
  const std::string_view parent = parent_of(unknown);
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  const std::size_t allowed = std::max<std::size_t>(2, leaf.size() / 3);
  // The distance is at least the length difference: skip what cannot be within `allowed` (a pasted 10 kB key
  // would otherwise cost 10 kB × every known key, found as the fuzz target's hot spot).
  const auto within_reach = [&](std::string_view a, std::string_view b) {
    return (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) <= allowed;
  };
  for (const std::string& candidate : known) {
    std::size_t d = within_reach(unknown, candidate) ? edit_distance(unknown, candidate) : best_distance;
    // The right key in the wrong section ("train.lr" for "optimizer.lr") is a near miss too.
    if (within_reach(leaf, leaf_of(candidate))) {
      d = std::min(d, edit_distance(leaf, leaf_of(candidate)) + (parent_of(candidate) == parent ? 0 : 1));
    }
    if (d < best_distance) best_distance = d, best = candidate;
  }
  if (best_distance <= allowed) return fmt::format(" (did you mean {}?)", best);
  std::vector<std::string> siblings;
  for (const std::string& candidate : known) {
    if (parent_of(candidate) == parent) siblings.emplace_back(leaf_of(candidate));
  }
  if (siblings.empty()) return {};
  return fmt::format(" (known keys{}: {})", parent.empty() ? std::string() : " in " + std::string(parent),
                     fmt::join(siblings, ", "));
}

}  // namespace

void report_unknown_keys(const ParseState& state) {
  if (state.unknown.empty()) return;
  std::string message;
  std::string last_where;
  for (const std::string& path : state.unknown) {
    auto note = state.unknown_notes.find(path);
    const std::string hint =
        note != state.unknown_notes.end() ? " (" + note->second + ")" : suggest(path, state.known);
    const std::string where = state.where(path);
    message += message.empty() ? "" : "; ";
    if (where != last_where) message += where + ": ";
    message += fmt::format("unknown key {}{}", path, hint);
    last_where = where;
  }
  throw Error(message);
}

}  // namespace cleave::config
