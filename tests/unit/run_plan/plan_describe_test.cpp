// Plan::describe_schedule, the run log's name for the schedule, and Plan::schedule_label, run.json's: a schedule over
// pp ranks, a multi-chunk schedule that runs all its chunks on one rank at pp 1 (once "single stage" beside "6 blocks
// in 2 stages", a contradiction), and one stage on one rank.
#include <gtest/gtest.h>

#include <string>

#include "engine/config/config.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan::plan_describe_test {
namespace {

Plan plan_of(int pp, const std::string& schedule) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1}, "data": {"type": "synthetic"}})",
                                             "<string>",
                                             {"parallel.schedule=" + schedule,
                                              "parallel.pipeline_model_parallel_size=" + std::to_string(pp)});
  c.resolve(pp);
  return make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
}

TEST(PlanDescribe, NamesTheScheduleAndWhatOneRankRuns) {
  EXPECT_EQ(plan_of(2, "1f1b").describe_schedule(), "schedule 1f1b");
  EXPECT_EQ(plan_of(2, "zb_v").describe_schedule(), "schedule zb_v");
  const Plan one_rank_v = plan_of(1, "zb_v");
  ASSERT_EQ(one_rank_v.num_stages(), 2);
  EXPECT_EQ(one_rank_v.describe_schedule(), "schedule zb_v on one rank, running its 2 chunks");
  EXPECT_EQ(plan_of(1, "1f1b").describe_schedule(), "single stage");
}

TEST(PlanDescribe, RunJsonsLabelIsTheLogsWithoutTheWordSchedule) {
  EXPECT_EQ(plan_of(2, "1f1b").schedule_label(), "1f1b");
  EXPECT_EQ(plan_of(1, "zb_v").schedule_label(), "zb_v on one rank, running its 2 chunks");
  EXPECT_EQ(plan_of(1, "dualpipev").schedule_label(), "dualpipev on one rank, running its 2 chunks");
  EXPECT_EQ(plan_of(1, "1f1b").schedule_label(), "single stage");
}

}  // namespace
}  // namespace cleave::run_plan::plan_describe_test
