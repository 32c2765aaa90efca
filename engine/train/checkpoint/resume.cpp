// Resuming and restarting a run: see resume.hpp.
#include "engine/train/checkpoint/resume.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;

// A damaged file names itself: the parser's own text says neither which file nor what to do.
nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  CLEAVE_CHECK(in.good(), "--resume: cannot read {}", path.string());
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  CLEAVE_CHECK(!doc.is_discarded(),
               "--resume: {} is not valid JSON (damaged or cut short); restore it, or resume from an earlier "
               "checkpoint with --resume {}/step_NNNNNNN",
               path.string(), path.parent_path().parent_path().string());
  return doc;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::vector<ConfigChange> check_resumed_config(RankSetup& setup, const std::string& step_dir,
                                               const std::vector<std::string>& allowed) {
  std::vector<ConfigChange> changes;
  RankFailure failure;
  try {
    const nlohmann::json index = CheckpointReader(step_dir).index();  // its checks: a damaged index is damage
    const fs::path run_config = fs::path(setup.config.train.out_dir) / "config.json";
    std::optional<nlohmann::json> before;
    if (index.contains("config")) before = index.at("config");
    else if (fs::exists(run_config)) before = read_json(run_config);
    const nlohmann::json after = nlohmann::json::parse(config::to_json(setup.config));
    if (before) changes = config_changes(*before, after);
    check_config_changes(changes, allowed, after, step_dir);
  } catch (const std::exception& e) {
    failure = rank_failure(e);
  }
  throw_if_any_rank_failed(setup.world, failure);
  if (setup.reports()) {
    for (const ConfigChange& c : changes) {
      // A change neither free nor allowed is one the checkpoint loader refuses next (the model, the seed, ...):
      // it is listed, but not as allowed.
      const bool allowed_by_flag = !c.free && std::find(allowed.begin(), allowed.end(), c.key) != allowed.end();
      log::info("resume: config changed since the checkpoint: {}{}", c.describe(),
                allowed_by_flag ? " (allowed by --allow-config-change)" : "");
    }
  }
  return changes;
}

void keep_previous_config(const std::string& out_dir, const std::string& new_text, std::int64_t step) {
  const fs::path current = fs::path(out_dir) / "config.json";
  if (!fs::exists(current)) return;
  if (read_text(current) == new_text) return;
  fs::path kept = fs::path(out_dir) / fmt::format("config.before_step_{}.json", step);
  for (int n = 2; fs::exists(kept); ++n) kept = fs::path(out_dir) / fmt::format("config.before_step_{}.{}.json", step, n);
  fs::rename(current, kept);
  log::info("resume: the previous config.json is kept as {}", kept.string());
}

std::string keep_earlier_attempt(const std::string& out_dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool run_file = name == "config.json" || name == "metrics.jsonl" || name == "run.json" ||
                          name == "report.html" || name == "trace.json" ||
                          (name.rfind("config.before_step_", 0) == 0 && entry.path().extension() == ".json");
    if (run_file && entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  if (files.empty()) return {};
  fs::path kept;
  for (int n = 1; kept.empty() || fs::exists(kept); ++n) kept = fs::path(out_dir) / fmt::format("earlier_attempt_{}", n);
  fs::create_directory(kept);
  for (const fs::path& f : files) fs::rename(f, kept / f.filename());
  return kept.string();
}

report::RunSummary with_resume(report::RunSummary record, const std::string& out_dir, bool resumed,
                               std::int64_t step, const std::string& step_dir,
                               const std::vector<ConfigChange>& changes) {
  if (!resumed) return record;
  const fs::path path = fs::path(out_dir) / "run.json";
  if (fs::exists(path)) {
    try {
      for (auto& r : report::parse_run_summary(read_text(path), path.string()).resumes) {
        if (r.at_step < step) record.resumes.push_back(std::move(r));
      }
    } catch (const Error& e) {
      log::warn("run.json: the earlier file does not parse ({}); its resume history is not carried over", e.what());
    }
  }
  report::ResumeRecord now{step, step_dir, {}};
  for (const ConfigChange& c : changes) {
    now.config_changes.push_back({c.key, c.before.is_null() ? "absent" : c.before.dump(),
                                  c.after.is_null() ? "absent" : c.after.dump(),
                                  c.free ? "resume" : "--allow-config-change"});
  }
  record.resumes.push_back(std::move(now));
  return record;
}

RestartRecord read_restart_record(const std::string& path, bool reads) {
  RestartRecord r;
  if (path.empty() || !reads) return r;
  try {
    std::ifstream in(path);
    CLEAVE_CHECK(in.good(), "cannot read it");
    const nlohmann::json j = nlohmann::json::parse(in);
    r.number = j.at("restart").get<std::int64_t>();
    r.launched_unix_s = j.at("launched_unix_s").get<double>();
  } catch (const std::exception& e) {
    log::warn("restart record {}: {}; the restart's timings are not recorded", path, e.what());
    r = {};
  }
  return r;
}

}  // namespace cleave::train
