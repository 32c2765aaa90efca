// The measured timeline of the last training step: gathered from replica 0's pp ranks onto world rank 0 and
// written as a Chrome trace and an SVG (train.trace). REDUCE_GRAD and OPTIMIZER_STEP are actions of the step,
// so their real duration is on the timeline.
#include <algorithm>
#include <array>
#include <limits>

#include "engine/train/collectives.hpp"
#include "engine/train/measured_trace.hpp"
#include "pipeline/trace.hpp"

namespace cleave::train {

// Measured timelines of every pp rank of replica 0 (dp 0, tp 0), merged on world rank 0.
pipeline::Timeline gather_timeline(RankSetup& s, const std::vector<pipeline::TimedAction>& last_step) {
  pipeline::Timeline timeline;
  if (s.coords.dp_rank != 0 || s.coords.cp_rank != 0 || s.coords.tp_rank != 0) return timeline;
  struct Row {
    std::int32_t kind, stage, microbatch;
    std::int64_t start_ns, end_ns;
    std::array<std::int64_t, pipeline::kNumCommWaitKinds> wait_ns;  // TimedAction::comm_wait
  };
  std::vector<Row> mine;
  for (const auto& t : last_step) {
    Row row{static_cast<std::int32_t>(t.action.kind), t.action.stage, t.action.microbatch,
            static_cast<std::int64_t>(t.start * 1e3), static_cast<std::int64_t>(t.end * 1e3), {}};
    for (std::size_t k = 0; k < row.wait_ns.size(); ++k) row.wait_ns[k] = static_cast<std::int64_t>(t.comm_wait[k] * 1e3);
    mine.push_back(row);
  }
  std::vector<std::vector<Row>> all{mine};
  if (s.grid.pp_size() > 1) all = all_gather_values<Row>(*s.groups.pp, mine);
  if (!s.reports()) return timeline;
  std::int64_t origin = std::numeric_limits<std::int64_t>::max();
  for (const auto& rows : all) {
    for (const Row& row : rows) origin = std::min(origin, row.start_ns);
  }
  timeline.ranks.resize(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    for (const Row& row : all[r]) {
      pipeline::TimedAction t;
      t.action = {static_cast<pipeline::ActionKind>(row.kind), row.stage, row.microbatch};
      t.start = static_cast<double>(row.start_ns - origin) * 1e-6;  // ms
      t.end = static_cast<double>(row.end_ns - origin) * 1e-6;
      for (std::size_t k = 0; k < row.wait_ns.size(); ++k) t.comm_wait[k] = static_cast<double>(row.wait_ns[k]) * 1e-6;
      timeline.ranks[r].push_back(t);
    }
  }
  return timeline;
}

// The merged measured timeline as a Chrome trace and an SVG (world rank 0 writes).
void write_measured_trace(RankSetup& s, const std::vector<pipeline::TimedAction>& last_step,
                          const std::string& directory) {
  const pipeline::Timeline timeline = gather_timeline(s, last_step);
  if (!s.reports()) return;
  const int pp_size = s.grid.pp_size();
  const auto stats = pipeline::timeline_stats(timeline);
  pipeline::TraceOptions options;
  options.title = fmt::format("measured: {} on {} pp ranks, {} micro-batches (last step)", s.plan.schedule.name,
                              pp_size, s.plan.schedule.num_microbatches);
  options.subtitle = fmt::format("makespan {:.2f} ms | bubble_fraction {:.3f} | stage_bubble_fraction {:.3f}",
                                 stats.makespan, stats.bubble_fraction, stats.stage_bubble_fraction);
  options.unit = "ms";
  options.microseconds_per_unit = 1000.0;
  pipeline::write_chrome_trace(timeline, directory + "/trace.json", options);
  pipeline::write_timeline_svg(s.plan.schedule, timeline, directory + "/trace.svg", options);
}

}  // namespace cleave::train
