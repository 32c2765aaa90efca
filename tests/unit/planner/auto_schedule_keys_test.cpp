// The schedule-auto keys reach the automatic scheduler that make_plan runs (engine/run_plan/plan.cpp,
// auto_schedule_options): parallel.auto_schedule_objective "span" and parallel.auto_schedule_profile (a `cleave
// profile` file whose measured F, I and W are not the cost model's ratio) each give a schedule of their own, where
// a key make_plan dropped would give the schedule of the same config without it. (The memory limit and the stash
// fraction: schedule_cache_test.cpp; what each option does inside the search: tests/unit/pipeline.)
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/measured_costs.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::auto_schedule_keys_test {
namespace {

constexpr const char* kTiny = R"({
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
  "batch": {"global_batch_size": 16, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

// pp 4 under schedule auto, one rank's plan (pp rank 0); `overrides` after the base ones.
run_plan::Plan auto_plan(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  config::RunConfig c = config::parse_config(kTiny, "<string>", all);
  c.resolve(4);
  return run_plan::make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
}

class AutoScheduleKeys : public testing::ScratchDirTest {
 protected:
  AutoScheduleKeys() : ScratchDirTest("cleave_auto_keys_test_") {}

  // A measured profile of every block of kTiny at tp 1, micro-batch 1, whose weight-gradient pass costs four
  // times its forward (the cost model's FLOP ratio makes them equal), with a P2P fit of 0.5 ms latency: written to
  // a file, its path returned.
  std::string heavy_weight_profile() const {
    config::RunConfig c = config::parse_config(kTiny, "<string>", {});
    const partition::ModelSpec spec = run_plan::model_spec(c.model);
    HardwareProfile p;
    p.name = "heavy weight gradients";
    p.source = "test";
    p.flops_f32 = p.flops_bf16 = 1e12;
    p.memory_bandwidth_Bps = 1e12;
    p.intra_node = p.inter_node = Link{1e-6, 1e10};
    p.ranks_per_node = 4;
    for (const auto& block : spec.blocks) {
      const std::string key = partition::block_shape_key(block);
      if (!p.measured.covers(key, 1)) p.measured.blocks.push_back({key, 1, 1, 1e-3, 1e-3, 4e-3});
    }
    p.measured.p2p = partition::AlphaBeta{2, 0.5e-3, 1e8};
    const std::string path = (dir_ / "heavy_w.json").string();
    std::ofstream(path) << profile_to_json(p).dump();
    return path;
  }
};

TEST_F(AutoScheduleKeys, SpanObjectiveGivesItsOwnSchedule) {
  // The zero-bubble paper's setting, where a rank's span and the step's makespan part ways: a stash weighing 0.3
  // after its I, a limit of 3 stashes, and a P2P latency (with none, both objectives pick the same schedule here).
  const std::vector<std::string> paper = {"parallel.auto_schedule_memory_limit=3",
                                          "parallel.auto_schedule_weight_stash_fraction=0.3",
                                          "parallel.auto_schedule_profile=" + heavy_weight_profile()};
  std::vector<std::string> span = paper;
  span.push_back("parallel.auto_schedule_objective=\"span\"");
  const run_plan::Plan by_makespan = auto_plan(paper);
  const run_plan::Plan by_span = auto_plan(span);
  EXPECT_NE(by_span.schedule, by_makespan.schedule)
      << "parallel.auto_schedule_objective \"span\" made the makespan objective's schedule";
}

TEST_F(AutoScheduleKeys, MeasuredProfileGivesItsOwnSchedule) {
  const run_plan::Plan from_model = auto_plan({});
  const run_plan::Plan from_profile = auto_plan({"parallel.auto_schedule_profile=" + heavy_weight_profile()});
  EXPECT_NE(from_profile.schedule, from_model.schedule)
      << "parallel.auto_schedule_profile (W = 4 F measured) made the cost model's schedule";
}

}  // namespace
}  // namespace cleave::planner::auto_schedule_keys_test
