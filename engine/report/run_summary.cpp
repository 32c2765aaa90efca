// run.json writer and reader (run_summary.hpp).
#include "engine/report/run_summary.hpp"

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::report {

std::string to_json_text(const RunSummary& s) {
  nlohmann::ordered_json j;
  j["world_size"] = s.world_size;
  j["grid"] = s.grid;
  j["schedule"] = s.schedule;
  j["partition"] = s.partition;
  j["model"] = s.model;
  j["batch"] = s.batch;
  j["throughput_unit"] = s.throughput_unit;
  j["memory_limit"] = s.memory_limit;
  j["cpu"] = s.cpu;
  j["cpu_kernels"] = s.cpu_kernels;
  if (!s.cpu_gemm.device_blas.empty()) {
    j["cpu_gemm"] = {{"device_blas", s.cpu_gemm.device_blas}, {"f32", s.cpu_gemm.f32}, {"bf16", s.cpu_gemm.bf16},
                     {"bf16_kernels", s.cpu_gemm.bf16_kernels}, {"description", s.cpu_gemm.description}};
  }
  j["model_flops_per_step"] = s.model_flops_per_step;
  j["peak_flops_per_rank"] = s.peak_flops_per_rank;
  j["peak_source"] = s.peak_source;
  if (!s.init_from.empty()) j["init_from"] = s.init_from;
  j["categories"] = s.categories;
  j["ranks"] = nlohmann::ordered_json::array();
  for (const RankSummary& r : s.ranks) {
    nlohmann::ordered_json row;
    row["rank"] = r.rank;
    row["tp_rank"] = r.tp_rank;
    row["cp_rank"] = r.cp_rank;
    row["dp_rank"] = r.dp_rank;
    row["ep_rank"] = r.ep_rank;
    row["pp_rank"] = r.pp_rank;
    row["stages"] = r.stages;
    row["peak_bytes"] = r.peak_bytes;
    row["peak_total"] = r.peak_total;
    row["estimate_bytes"] = r.estimate_bytes;
    if (r.estimate_total_bytes > 0) row["estimate_total_bytes"] = r.estimate_total_bytes;
    if (r.estimate_host_pinned_bytes > 0) row["estimate_host_pinned_bytes"] = r.estimate_host_pinned_bytes;
    j["ranks"].push_back(row);
  }
  j["resumes"] = nlohmann::ordered_json::array();
  for (const ResumeRecord& r : s.resumes) {
    nlohmann::ordered_json row;
    row["at_step"] = r.at_step;
    row["checkpoint"] = r.checkpoint;
    row["config_changes"] = nlohmann::ordered_json::array();
    for (const ConfigChangeRecord& c : r.config_changes) {
      row["config_changes"].push_back({{"key", c.key}, {"before", c.before}, {"after", c.after},
                                       {"allowed_by", c.allowed_by}});
    }
    j["resumes"].push_back(row);
  }
  return j.dump(2) + "\n";
}

RunSummary parse_run_summary(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    CLEAVE_THROW("run summary {}: not valid JSON ({})", path, e.what());
  }
  CLEAVE_CHECK(j.is_object(), "run summary {}: expected a JSON object, found {}", path, j.type_name());
  RunSummary s;
  try {
    s.world_size = j.at("world_size").get<int>();
    s.grid = j.value("grid", "");
    s.schedule = j.value("schedule", "");
    s.partition = j.value("partition", "");
    s.model = j.value("model", "");
    s.batch = j.value("batch", "");
    s.throughput_unit = j.value("throughput_unit", "tok");
    s.memory_limit = j.value("memory_limit", std::int64_t{0});
    s.cpu = j.value("cpu", std::string());
    s.cpu_kernels = j.value("cpu_kernels", std::string());
    if (j.contains("cpu_gemm")) {
      const auto& g = j.at("cpu_gemm");
      s.cpu_gemm = {g.at("device_blas").get<std::string>(), g.value("f32", ""), g.value("bf16", ""),
                    g.value("bf16_kernels", false), g.value("description", "")};
    }
    s.model_flops_per_step = j.value("model_flops_per_step", 0.0);
    s.peak_flops_per_rank = j.value("peak_flops_per_rank", 0.0);
    s.peak_source = j.value("peak_source", "");
    s.init_from = j.value("init_from", "");
    s.categories = j.at("categories").get<std::vector<std::string>>();
    for (const auto& row : j.at("ranks")) {
      RankSummary r;
      r.rank = row.at("rank").get<int>();
      r.tp_rank = row.value("tp_rank", 0);
      r.cp_rank = row.value("cp_rank", 0);  // absent in run.json files from before context parallelism
      r.dp_rank = row.value("dp_rank", 0);
      r.ep_rank = row.value("ep_rank", 0);
      r.pp_rank = row.value("pp_rank", 0);
      r.stages = row.value("stages", std::vector<int>{});
      r.peak_bytes = row.at("peak_bytes").get<std::vector<std::int64_t>>();
      r.peak_total = row.value("peak_total", std::int64_t{0});
      r.estimate_bytes = row.value("estimate_bytes", std::vector<std::int64_t>{});
      r.estimate_total_bytes = row.value("estimate_total_bytes", std::int64_t{0});
      r.estimate_host_pinned_bytes = row.value("estimate_host_pinned_bytes", std::int64_t{0});
      s.ranks.push_back(std::move(r));
    }
    for (const auto& row : j.value("resumes", nlohmann::json::array())) {
      ResumeRecord r;
      r.at_step = row.at("at_step").get<std::int64_t>();
      r.checkpoint = row.value("checkpoint", "");
      for (const auto& c : row.value("config_changes", nlohmann::json::array())) {
        r.config_changes.push_back({c.at("key").get<std::string>(), c.value("before", ""), c.value("after", ""),
                                    c.value("allowed_by", "")});
      }
      s.resumes.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    CLEAVE_THROW("run summary {}: missing or mistyped field ({})", path, e.what());
  }
  for (const RankSummary& r : s.ranks) {
    CLEAVE_CHECK(r.peak_bytes.size() == s.categories.size(),
                 "run summary {}: rank {} has {} peak_bytes values for {} categories", path, r.rank,
                 r.peak_bytes.size(), s.categories.size());
  }
  return s;
}

}  // namespace cleave::report
