// Schedule text form: writer and parser (format in schedule_text.hpp).
#include "pipeline/schedule_text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::pipeline {
namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> words;
  std::size_t pos = 0;
  while (pos < s.size()) {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\r')) ++pos;
    const std::size_t begin = pos;
    while (pos < s.size() && s[pos] != ' ' && s[pos] != '\t' && s[pos] != '\r') ++pos;
    if (pos > begin) words.push_back(s.substr(begin, pos - begin));
  }
  return words;
}

std::optional<int> to_int(std::string_view s) {
  int value = 0;
  if (s.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

constexpr std::string_view kKeys[] = {"name",           "pp_size",   "num_stages",      "num_microbatches",
                                      "virtual_stages", "placement", "overlap_fb_pairs"};

// The file's lines, each checked as it is read: the header keys and the rank lines, with their line numbers.
struct ScheduleLines {
  std::map<std::string, std::pair<std::string, int>> header;      // key -> (value, line)
  std::map<int, std::pair<std::vector<Action>, int>> rank_lines;  // rank -> (actions, line)
};

ScheduleLines read_lines(std::string_view text, std::string_view source) {
  ScheduleLines lines;
  auto& header = lines.header;
  auto& rank_lines = lines.rank_lines;
  int line_number = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t eol = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto colon = line.find(':');
    CLEAVE_CHECK(colon != std::string_view::npos,
                 "schedule file '{}' line {}: expected 'rank N: actions...' or 'key: value', got '{}'", source,
                 line_number, line);
    const std::string_view key = trim(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (key.rfind("rank", 0) == 0) {
      const auto number = to_int(trim(key.substr(4)));
      CLEAVE_CHECK(number.has_value() && *number >= 0,
                   "schedule file '{}' line {}: '{}' is not 'rank N' with N a rank number >= 0", source, line_number,
                   key);
      CLEAVE_CHECK(!rank_lines.count(*number), "schedule file '{}' line {}: rank {} already has a line (line {})",
                   source, line_number, *number, rank_lines[*number].second);
      std::vector<Action> actions;
      const auto words = split_words(value);
      for (std::size_t t = 0; t < words.size(); ++t) {
        Action action;
        std::string why;
        CLEAVE_CHECK(try_parse_action(words[t], action, why), "schedule file '{}' line {}, token {} ('{}'): {}",
                     source, line_number, t + 1, words[t], why);
        actions.push_back(action);
      }
      rank_lines[*number] = {std::move(actions), line_number};
      continue;
    }
    CLEAVE_CHECK(std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys),
                 "schedule file '{}' line {}: unknown key '{}' (known: {}, or 'rank N')", source, line_number, key,
                 fmt::join(kKeys, ", "));
    CLEAVE_CHECK(!header.count(std::string(key)), "schedule file '{}' line {}: '{}' is given twice (first on line {})",
                 source, line_number, key, header[std::string(key)].second);
    header[std::string(key)] = {std::string(value), line_number};
  }
  return lines;
}

// Which rank runs each stage: the 'placement:' line as written, else the rank each stage's actions are on (a
// stage on two ranks, or a stage of [0, num_stages) on none, is refused).
std::vector<int> stage_placement(const ScheduleLines& lines, const Schedule& s, std::string_view source) {
  const auto& header = lines.header;
  const auto& rank_lines = lines.rank_lines;
  std::vector<int> placement;
  if (header.count("placement")) {
    const auto& [value, line] = header.at("placement");
    for (auto word : split_words(value)) {
      const auto rank = to_int(word);
      CLEAVE_CHECK(rank.has_value(), "schedule file '{}' line {}: placement entry '{}' is not a rank number", source,
                   line, word);
      placement.push_back(*rank);
    }
  } else {
    // Stages as they appear (never a table sized by a number from the file: a stage index is only read).
    std::map<int, int> placed;  // stage -> rank
    for (int r = 0; r < s.pp_size; ++r) {
      for (const auto& a : s.ranks[r]) {
        if (!has_stage(a.kind) || a.stage < 0 || a.stage >= s.num_stages) continue;
        const auto [it, inserted] = placed.emplace(a.stage, r);
        CLEAVE_CHECK(inserted || it->second == r,
                     "schedule file '{}': stage {} appears on rank {} (line {}) and rank {} (line {}); a stage runs on "
                     "one rank (add a 'placement:' line to say which)",
                     source, a.stage, it->second, rank_lines.at(it->second).second, r, rank_lines.at(r).second);
      }
    }
    int missing = 0;  // the first stage in [0, num_stages) that no action names
    for (const auto& entry : placed) {
      if (entry.first != missing) break;
      ++missing;
    }
    CLEAVE_CHECK(missing >= s.num_stages,
                 "schedule file '{}': stage {} appears on no rank, so its placement is unknown (add a 'placement:' "
                 "line)",
                 source, missing);
    for (const auto& entry : placed) placement.push_back(entry.second);
  }
  return placement;
}

}  // namespace

std::string format_schedule(const Schedule& s) {
  std::string out = "# cleave pipeline schedule: one line per pp rank, one action per token (docs/schedules.md)\n";
  if (!s.name.empty()) out += fmt::format("name: {}\n", s.name);
  out += fmt::format("pp_size: {}\nnum_stages: {}\nnum_microbatches: {}\nvirtual_stages: {}\nplacement: {}\n", s.pp_size,
                     s.num_stages, s.num_microbatches, s.virtual_stages, fmt::join(s.stage_to_rank, " "));
  if (s.overlap_fb_pairs) out += "overlap_fb_pairs: true\n";  // written only when set: older files stay as they were
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    out += fmt::format("rank {}:", r);
    for (const auto& a : s.ranks[r]) {
      out += ' ';
      out += format_action(a);
    }
    out += '\n';
  }
  return out;
}

namespace {

// Header `key` as an integer >= 1 (nullopt when absent).
std::optional<int> header_int(const ScheduleLines& lines, const std::string& key, std::string_view source) {
  auto it = lines.header.find(key);
  if (it == lines.header.end()) return std::nullopt;
  const auto value = to_int(it->second.first);
  CLEAVE_CHECK(value.has_value() && *value >= 1, "schedule file '{}' line {}: {} must be an integer >= 1, got '{}'",
               source, it->second.second, key, it->second.first);
  return value;
}

// pp_size (default: the rank lines' count, which must equal it) and each rank's actions, moved out of `lines`.
void take_rank_lines(ScheduleLines& lines, std::string_view source, Schedule& s) {
  auto& rank_lines = lines.rank_lines;
  const int rank_count = static_cast<int>(rank_lines.size());
  s.pp_size = header_int(lines, "pp_size", source).value_or(rank_count);
  CLEAVE_CHECK(rank_count == s.pp_size, "schedule file '{}': pp_size is {} but there are {} rank lines", source,
               s.pp_size, rank_count);
  s.ranks.resize(s.pp_size);
  for (auto& [rank, entry] : rank_lines) {
    CLEAVE_CHECK(rank < s.pp_size, "schedule file '{}' line {}: rank {} is out of range for pp_size {} (ranks 0..{})",
                 source, entry.second, rank, s.pp_size, s.pp_size - 1);
    s.ranks[rank] = std::move(entry.first);
  }
}

// num_stages and num_microbatches: the header's, else one past the largest the actions name.
void read_counts(const ScheduleLines& lines, std::string_view source, Schedule& s) {
  int max_stage = -1, max_mb = -1;
  for (const auto& actions : s.ranks) {
    for (const auto& a : actions) {
      max_stage = std::max(max_stage, a.stage);
      max_mb = std::max(max_mb, a.microbatch);
    }
  }
  s.num_stages = header_int(lines, "num_stages", source).value_or(max_stage + 1);
  s.num_microbatches = header_int(lines, "num_microbatches", source).value_or(max_mb + 1);
  CLEAVE_CHECK(s.num_stages >= 1, "schedule file '{}' names no stage; add compute actions or num_stages", source);
  CLEAVE_CHECK(s.num_microbatches >= 1, "schedule file '{}' names no micro-batch; add compute actions or "
               "num_microbatches", source);
}

// virtual_stages: the header's, else the stages spread evenly over the ranks.
int virtual_stages_of(const ScheduleLines& lines, std::string_view source, const Schedule& s) {
  if (const auto v = header_int(lines, "virtual_stages", source)) return *v;
  CLEAVE_CHECK(s.num_stages % s.pp_size == 0,
               "schedule file '{}': {} stages cannot be spread evenly over {} ranks (every rank holds the same "
               "number of stages)",
               source, s.num_stages, s.pp_size);
  return s.num_stages / s.pp_size;
}

// overlap_fb_pairs: 'true' or 'false', false when absent.
bool overlap_fb_pairs_of(const ScheduleLines& lines, std::string_view source) {
  const auto it = lines.header.find("overlap_fb_pairs");
  if (it == lines.header.end()) return false;
  const auto& [value, line] = it->second;
  CLEAVE_CHECK(value == "true" || value == "false",
               "schedule file '{}' line {}: overlap_fb_pairs must be 'true' or 'false', got '{}'", source, line,
               value);
  return value == "true";
}

}  // namespace

Schedule parse_schedule(std::string_view text, std::string_view source) {
  try {
    ScheduleLines lines = read_lines(text, source);
    CLEAVE_CHECK(!lines.rank_lines.empty(), "schedule file '{}' has no 'rank N: ...' lines", source);
    Schedule s;
    s.name = lines.header.count("name") ? lines.header.at("name").first : std::string(source);
    take_rank_lines(lines, source, s);
    read_counts(lines, source, s);
    s.stage_to_rank = stage_placement(lines, s, source);
    s.virtual_stages = virtual_stages_of(lines, source, s);
    s.overlap_fb_pairs = overlap_fb_pairs_of(lines, source);
    // Shape errors name the source, not the schedule's own name.
    const std::string name = std::exchange(s.name, std::string(source));
    check_schedule_shape(s);
    s.name = name;
    return s;
  } catch (const Error& e) {
    rethrow_one_line(e);  // names and keys quoted from the input may hold control characters
  }
}

void save_schedule(const Schedule& schedule, const std::string& path) {
  std::ofstream out(path);
  CLEAVE_CHECK(out.good(), "cannot open schedule file '{}' for writing", path);
  out << format_schedule(schedule);
  out.close();
  CLEAVE_CHECK(out.good(), "failed writing schedule file '{}'", path);
}

Schedule load_schedule(const std::string& path) {
  std::error_code ec;
  CLEAVE_CHECK(!std::filesystem::is_directory(path, ec), "schedule file '{}' is a directory; give a schedule file",
               path);
  std::ifstream in(path);
  CLEAVE_CHECK(in.good(), "cannot open schedule file '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_schedule(buffer.str(), path);
}

}  // namespace cleave::pipeline
