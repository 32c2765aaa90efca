// run.json (engine/report/run_summary.hpp): every rank's coordinates, stages and allocator peaks by category,
// gathered to world rank 0 at the end of a run together with the memory plan's estimate per pp rank, so the
// report can draw per-rank memory against device.memory_limit without the ranks.
#include <filesystem>

#include "engine/core/cpu_features.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/train/collectives.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/run_record.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

report::CpuGemmRecord cpu_gemm_record(const config::RunConfig& config) {
  if (config.device.type != DeviceType::kCpu) return {};
  const ops::CpuGemmChoices choices = ops::resolved_cpu_gemms(config.device.blas);
  return {std::string(enum_name(choices.requested)), std::string(enum_name(choices.f32.library)),
          std::string(enum_name(choices.bf16.library)), choices.bf16.bf16_kernels,
          ops::cpu_gemm_description(config.device.blas)};
}

report::RunSummary gather_run_summary(RankSetup& s) {
  // One row of int64 per rank: tp, cp, dp, ep, pp, peak_total, peak per category, stage count, stages.
  const MemoryStats stats = s.allocator->stats();
  std::vector<std::int64_t> mine{s.coords.tp_rank, s.coords.cp_rank, s.coords.dp_rank,
                                 s.coords.ep_rank, s.coords.pp_rank, stats.peak_total};
  for (int c = 0; c < kNumMemoryCategories; ++c) mine.push_back(stats.peak[static_cast<std::size_t>(c)]);
  mine.push_back(static_cast<std::int64_t>(s.plan.local_stages.size()));
  for (int stage : s.plan.local_stages) mine.push_back(stage);
  const auto rows = all_gather_values<std::int64_t>(s.world, std::span<const std::int64_t>(mine));

  report::RunSummary summary;
  summary.world_size = s.world.size();
  summary.grid = s.grid.str();
  summary.schedule = s.plan.schedule_label();
  summary.partition = s.plan.describe_partition();
  summary.model = fmt::format("{}, {} in {}", s.plan.spec.type,
                              count_of(static_cast<std::int64_t>(s.plan.spec.blocks.size()), "block"),
                              count_of(s.plan.num_stages(), "stage"));
  summary.batch = fmt::format("global {} = micro {} x accum {} x dp {}", s.batch.global_batch_size,
                              s.batch.micro_batch_size, s.batch.gradient_accumulation_steps, s.grid.dp_size());
  summary.throughput_unit = std::string(s.plan.spec.throughput_unit());
  summary.memory_limit = s.config.device.memory_limit;
  summary.cpu = describe_cpu(read_cpu_features());
  summary.cpu_kernels = ops::cpu_blas_description();
  summary.cpu_gemm = cpu_gemm_record(s.config);
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    summary.categories.emplace_back(memory_category_name(static_cast<MemoryCategory>(c)));
  }
  std::map<int, std::vector<std::int64_t>> estimates;  // by pp rank
  std::map<int, std::int64_t> host_pinned;            // by pp rank: the plan's page-locked host staging
  std::map<int, std::int64_t> totals;                 // by pp rank: the plan's total (MemoryPlan::total())
  for (int rank = 0; rank < static_cast<int>(rows.size()); ++rank) {
    const auto& row = rows[static_cast<std::size_t>(rank)];
    constexpr std::size_t kCoords = 5;  // tp, cp, dp, ep, pp
    constexpr auto kCategories = static_cast<std::size_t>(kNumMemoryCategories);
    CLEAVE_ASSERT(row.size() >= kCoords + 2 + kCategories, "run summary row of rank {} has {} values", rank,
                  row.size());
    report::RankSummary r;
    r.rank = rank;
    r.tp_rank = static_cast<int>(row[0]);
    r.cp_rank = static_cast<int>(row[1]);
    r.dp_rank = static_cast<int>(row[2]);
    r.ep_rank = static_cast<int>(row[3]);
    r.pp_rank = static_cast<int>(row[4]);
    r.peak_total = row[kCoords];
    const auto peaks = row.begin() + static_cast<std::ptrdiff_t>(kCoords + 1);
    r.peak_bytes.assign(peaks, peaks + kNumMemoryCategories);
    const auto count = static_cast<std::size_t>(row[kCoords + 1 + kCategories]);
    for (std::size_t i = 0; i < count; ++i) r.stages.push_back(static_cast<int>(row[kCoords + 2 + kCategories + i]));
    if (!estimates.count(r.pp_rank)) {
      const run_plan::MemoryPlan plan =
          run_plan::estimate_rank_memory(s.plan, s.config, r.pp_rank, cpu_kernels_of(s.config));
      estimates[r.pp_rank].assign(plan.bytes.begin(), plan.bytes.end());
      host_pinned[r.pp_rank] = plan.host_pinned;
      totals[r.pp_rank] = plan.total();
    }
    r.estimate_bytes = estimates[r.pp_rank];
    r.estimate_host_pinned_bytes = host_pinned[r.pp_rank];
    r.estimate_total_bytes = totals[r.pp_rank];
    summary.ranks.push_back(std::move(r));
  }
  return summary;
}

void write_run_summary(const report::RunSummary& summary, const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "run.json").string();
  write_text_file(path, report::to_json_text(summary));
}

}  // namespace cleave::train
