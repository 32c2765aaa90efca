// The supervised job's records (restart_record.hpp).
#include "engine/supervise/restart_record.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::supervise {

double RestartRecord::seconds_lost() const {
  return redone_s + detection_s + teardown_s + startup_s.value_or(0) + load_s.value_or(0) + first_step_s.value_or(0);
}

nlohmann::ordered_json restart_json(const RestartRecord& r) {
  nlohmann::ordered_json j;
  j["restart"] = r.number;
  j["at_unix_s"] = r.at_unix_s;
  j["failed_ranks"] = r.failed_ranks;
  j["kind"] = r.kind;
  j["why"] = r.why;
  j["dropped_slots"] = r.dropped_slots;
  j["old_layout"] = r.old_layout;
  j["old_world"] = r.old_world;
  j["new_layout"] = r.new_layout;
  j["new_world"] = r.new_world;
  j["layout_choice"] = r.layout_choice;
  j["checkpoint"] = r.checkpoint.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.checkpoint);
  j["resumed_at_step"] = r.resumed_at_step;
  j["last_step_done"] = r.last_step_done;
  j["steps_redone"] = r.steps_redone;
  const auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json t;
  t["detection_s"] = r.detection_s;
  t["teardown_s"] = r.teardown_s;
  t["startup_s"] = opt(r.startup_s);
  t["load_s"] = opt(r.load_s);
  t["first_step_s"] = opt(r.first_step_s);
  j["recovery"] = t;
  j["redone_s"] = r.redone_s;
  j["seconds_lost"] = r.seconds_lost();
  return j;
}

std::string supervisor_json_text(const SupervisorRecord& record) {
  nlohmann::ordered_json j;
  j["outcome"] = record.outcome;
  j["slots"] = nlohmann::ordered_json::array();
  for (const Slot& s : record.slots) j["slots"].push_back(fmt::format("{}:{}", s.host, s.index));
  j["attempts"] = nlohmann::ordered_json::array();
  for (const AttemptRecord& a : record.attempts) {
    nlohmann::ordered_json row;
    row["attempt"] = a.number;
    row["world"] = a.world;
    row["layout"] = a.layout;
    row["command"] = a.command;
    row["started_unix_s"] = a.started_unix_s;
    row["ended_unix_s"] = a.ended_unix_s;
    row["exit_code"] = a.exit_code;
    row["outcome"] = a.outcome;
    row["log"] = a.log;
    j["attempts"].push_back(row);
  }
  j["restarts"] = nlohmann::ordered_json::array();
  for (const RestartRecord& r : record.restarts) j["restarts"].push_back(restart_json(r));
  return j.dump(2) + "\n";
}

void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    CLEAVE_CHECK(out.good(), "run: cannot write {}", tmp);
  }
  std::filesystem::rename(tmp, path);
}

bool merge_restarts_into_run_json(const std::string& run_json, const SupervisorRecord& record) {
  if (!std::filesystem::exists(run_json)) return false;
  std::ifstream in(run_json);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  j["restarts"] = nlohmann::ordered_json::array();
  for (const RestartRecord& r : record.restarts) j["restarts"].push_back(restart_json(r));
  replace_file(run_json, j.dump(2) + "\n");
  return true;
}

double MetricsRows::ms_after(std::int64_t step) const {
  double ms = 0;
  for (const auto& [s, t] : step_ms) ms += s > step ? t : 0.0;
  return ms;
}

double MetricsRows::mean_step_s() const {
  if (step_ms.empty()) return 0;
  double ms = 0;
  for (const auto& row : step_ms) ms += row.second;
  return ms * 1e-3 / static_cast<double>(step_ms.size());
}

MetricsRows read_metrics_rows(const std::string& path) {
  MetricsRows rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;
    const std::int64_t step = j["step"].get<std::int64_t>();
    rows.step_ms.emplace_back(step, j.value("step_ms", 0.0));
    rows.last_step = std::max(rows.last_step, step);
  }
  return rows;
}

namespace {

// The first metrics.jsonl row whose "restart" is `number` (the trainer writes the restart on the first row after
// it); nothing when the file or the row is missing. Lines that are not JSON objects are skipped.
std::optional<nlohmann::json> restart_metrics_row(const std::string& metrics_path, int number) {
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || j.value("restart", 0) != number) continue;
    return j;
  }
  return std::nullopt;
}

}  // namespace

bool fill_phase_times(RestartRecord& r, const std::string& metrics_path) {
  const std::optional<nlohmann::json> j = restart_metrics_row(metrics_path, r.number);
  if (!j) return false;
  r.startup_s = j->value("restart_startup_s", 0.0);
  r.load_s = j->value("restart_load_s", 0.0);
  r.first_step_s = j->value("restart_first_step_s", 0.0);
  return true;
}

std::optional<std::int64_t> resumed_elsewhere(const RestartRecord& r, const std::string& metrics_path) {
  const std::optional<nlohmann::json> j = restart_metrics_row(metrics_path, r.number);
  if (!j) return std::nullopt;
  const auto it = j->find("resumed_at_step");
  if (it == j->end() || !it->is_number_integer()) return std::nullopt;
  const auto step = it->get<std::int64_t>();
  return step == r.resumed_at_step ? std::nullopt : std::optional<std::int64_t>(step);
}

}  // namespace cleave::supervise
