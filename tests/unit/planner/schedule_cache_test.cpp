// The plan search's schedule reuse (run_plan::ScheduleCache) changes no result: a plan made with the cache has
// the schedule and partition of one made from scratch, every estimate of a search equals the same candidate
// estimated alone without the cache, and the cache tells apart what the auto scheduler reads (its memory limit
// counted the zero-bubble paper's way reaches the search, and a search on the estimate's prices is never slower
// than ZB-H1). A layout with more
// stages than blocks is refused before its schedule is built, with the error make_plan gave after building it,
// and a schedule's own refusals still come first; a world larger than any layout can use is refused before the
// search.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/run_plan/schedule_cache.hpp"
#include "search_equivalence.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::schedule_cache_test {
namespace {

constexpr const char* kTiny = R"({
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
  "batch": {"global_batch_size": 16, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

config::RunConfig tiny(int world, const std::vector<std::string>& overrides) {
  config::RunConfig c = config::parse_config(kTiny, "<string>", overrides);
  c.resolve(world);
  return c;
}

int microbatches(const config::RunConfig& c) {
  return static_cast<int>(c.resolved_batch().gradient_accumulation_steps);
}

HardwareProfile links() { return testing::synthetic_profile(1e9, 1e11, Link{1e-6, 1e10}, Link{1e-5, 1e9}, 4); }

// Each test's config files in a folder of its own, removed after it.
class ScheduleCache : public testing::ScratchDirTest {
 protected:
  ScheduleCache() : ScratchDirTest("cleave_schedule_cache_test_") {}
};

TEST_F(ScheduleCache, APlanMadeWithTheCacheEqualsOneMadeFromScratch) {
  run_plan::ScheduleCache cache;
  const std::vector<std::vector<std::string>> cases = {
      {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4"},
      {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=2", "train.recompute=full"},
      {"parallel.schedule=zb_h1", "parallel.pipeline_model_parallel_size=4"},
      {"parallel.schedule=interleaved_1f1b", "parallel.pipeline_model_parallel_size=2",
       "parallel.virtual_pipeline_stages=2"},
      {"parallel.schedule=dualpipev", "parallel.pipeline_model_parallel_size=2"}};
  for (int round = 0; round < 2; ++round) {  // the first round fills the cache, the second reads it
    for (const auto& overrides : cases) {
      const config::RunConfig c = tiny(4, overrides);
      const run_plan::Plan cached = run_plan::make_plan(c, microbatches(c), 0, &cache);
      const run_plan::Plan fresh = run_plan::make_plan(c, microbatches(c), 0);
      EXPECT_EQ(cached.schedule.ranks, fresh.schedule.ranks) << overrides.front();
      EXPECT_EQ(cached.schedule.stage_to_rank, fresh.schedule.stage_to_rank) << overrides.front();
      EXPECT_EQ(cached.partition.blocks_per_stage(), fresh.partition.blocks_per_stage()) << overrides.front();
    }
  }
  EXPECT_EQ(cache.size(), cases.size());
  EXPECT_EQ(cache.hits(), cases.size());
}

TEST_F(ScheduleCache, TheAutoSchedulesKeyHoldsWhatItsSearchReads) {
  run_plan::ScheduleCache cache;
  const config::RunConfig c = tiny(4, {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4"});
  run_plan::make_plan(c, microbatches(c), 0, &cache);
  // Another memory limit, another micro-batch count, another model (other F : I : W ratios): three searches.
  const config::RunConfig limited = tiny(4, {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4",
                                             "parallel.auto_schedule_memory_limit=2"});
  run_plan::make_plan(limited, microbatches(limited), 0, &cache);
  run_plan::make_plan(c, microbatches(c) / 2, 0, &cache);
  const config::RunConfig wider = tiny(4, {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4",
                                           "model.d_model=64"});
  run_plan::make_plan(wider, microbatches(wider), 0, &cache);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.hits(), 0u);
  // ZeRO, sequence parallelism, tp: not read by the search, one entry.
  const config::RunConfig tp2 = tiny(8, {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4",
                                         "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
  run_plan::make_plan(tp2, microbatches(tp2), 0, &cache);
  EXPECT_EQ(cache.hits(), 1u);
}

// A memory limit counted the zero-bubble paper's way through the config (parallel.auto_schedule_memory_limit, a
// stash weighing parallel.auto_schedule_weight_stash_fraction after its I, parallel.auto_schedule_objective span)
// reaches the search: at a limit of 3 on pp 4 and a fraction of 0.3 some rank holds more than 3 whole stashes
// (which the whole-stash count forbids) while the weighted count stays within 3; each key is its own cache entry.
TEST_F(ScheduleCache, TheZeroBubblePapersMemoryLimitReachesTheAutoSchedule) {
  const std::vector<std::string> base = {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4",
                                         "parallel.auto_schedule_memory_limit=3"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return tiny(4, extra);
  };
  // Peak live stashes over the ranks of a plan's schedule, a stash weighing `fraction` between its I and its W.
  auto peak = [](const run_plan::Plan& plan, double fraction) {
    double most = 0;
    for (const auto& actions : plan.schedule.ranks) {
      double before_input = 0, before_weight = 0;
      for (const pipeline::Action& a : actions) {
        if (a.kind == pipeline::ActionKind::kForward) before_input += 1;
        if (a.kind == pipeline::ActionKind::kBackwardInput) before_input -= 1, before_weight += 1;
        if (a.kind == pipeline::ActionKind::kBackwardWeight) before_weight -= 1;
        most = std::max(most, before_input + fraction * before_weight);
      }
    }
    return most;
  };
  run_plan::ScheduleCache cache;
  const config::RunConfig whole = with({});
  const config::RunConfig light = with({"parallel.auto_schedule_weight_stash_fraction=0.3"});
  const config::RunConfig span = with({"parallel.auto_schedule_weight_stash_fraction=0.3",
                                       "parallel.auto_schedule_objective=\"span\""});
  ASSERT_EQ(microbatches(whole), 16);
  const run_plan::Plan p_whole = run_plan::make_plan(whole, microbatches(whole), 0, &cache);
  const run_plan::Plan p_light = run_plan::make_plan(light, microbatches(light), 0, &cache);
  const run_plan::Plan p_span = run_plan::make_plan(span, microbatches(span), 0, &cache);
  EXPECT_LE(peak(p_whole, 1.0), 3.0);
  for (const run_plan::Plan* plan : {&p_light, &p_span}) {
    EXPECT_GT(peak(*plan, 1.0), 3.0);
    EXPECT_LE(peak(*plan, 0.3), 3.0 + 1e-9);
  }
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.hits(), 0u);
}

// SearchOptions::auto_schedule_priced (`simulate --auto-schedule-priced`): schedule auto searched on the estimate's
// own priced F, I, W and P2P. With transfers as slow as a block (the FLOP-ratio search prices none), the priced
// search, which has ZB-H1 among its candidates at 1F1B's memory, is never slower than ZB-H1 and here faster than
// the search on the FLOP ratio; it changes nothing for a schedule that is not auto.
TEST_F(ScheduleCache, ThePricedAutoScheduleIsNeverSlowerThanZbH1) {
  const std::string path = write("priced_auto.json", kTiny);
  HardwareProfile slow_links = links();
  slow_links.intra_node = Link{2e-3, 1e8};
  SearchOptions options;
  options.world = 4;
  auto estimate = [&](const std::string& schedule, bool priced) {
    const std::vector<std::string> overrides = {"parallel.schedule=" + schedule,
                                                "parallel.pipeline_model_parallel_size=4"};
    SearchOptions o = options;
    o.auto_schedule_priced = priced;
    return estimate_plan(path, overrides, choice_of_config(path, overrides, 4), slow_links, o);
  };
  const PlanEstimate h1 = estimate("zb_h1", false);
  const PlanEstimate priced = estimate("auto", true);
  const PlanEstimate flops = estimate("auto", false);
  ASSERT_TRUE(h1.valid && priced.valid && flops.valid) << h1.reason << priced.reason << flops.reason;
  EXPECT_LE(priced.step_s, h1.step_s * (1 + 1e-9));
  EXPECT_LT(priced.step_s, flops.step_s);  // the prices reach the search (0.0703 s against 0.0768 s when written)
  EXPECT_EQ(estimate("zb_h1", true).step_s, h1.step_s);
  std::printf("[ priced auto ] zb_h1 %.6f s, auto on FLOP ratio %.6f s, auto on prices %.6f s\n", h1.step_s,
              flops.step_s, priced.step_s);
}

TEST_F(ScheduleCache, MoreStagesThanBlocksIsRefusedBeforeTheScheduleIsBuilt) {
  // pp 4096 on a model of 6 blocks: the auto search alone would take hours; the refusal is immediate.
  const config::RunConfig c = tiny(4096, {"parallel.schedule=auto", "parallel.pipeline_model_parallel_size=4096",
                                          "batch.global_batch_size=4096"});
  const auto start = std::chrono::steady_clock::now();
  try {
    run_plan::make_plan(c, microbatches(c), 0);
    FAIL() << "pp 4096 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4096 pipeline stages (pipeline_model_parallel_size 4096 x virtual stages 1) "
                                         "but the model has only"),
              std::string::npos)
        << e.what();
    // The keys that fix it and the numbers that work (found by benchmarks/verify/layout_sweep.py: the message named
    // neither model.n_layers nor parallel.virtual_pipeline_stages).
    EXPECT_NE(std::string(e.what()).find("use pipeline_model_parallel_size x virtual stages <= "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.virtual_pipeline_stages"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.n_layers"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  // A schedule's own refusal still comes first: at resolve now, as bad input (a pure function of the config and the
  // world size), before any plan is built.
  try {
    const config::RunConfig dual = tiny(64, {"parallel.schedule=dualpipev", "parallel.pipeline_model_parallel_size=64",
                                             "batch.global_batch_size=64"});
    run_plan::make_plan(dual, microbatches(dual), 0);
    FAIL() << "dualpipev at pp 64 with 64 micro-batches accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("needs at least 128 micro-batches"), std::string::npos) << e.what();
  }
}

TEST_F(ScheduleCache, EverySearchedEstimateEqualsTheCandidateEstimatedAloneWithoutTheCache) {
  const std::string path = write("schedule_cache.json", kTiny);
  SearchOptions options;
  options.world = 8;
  const HardwareProfile profile = links();
  const SearchResult searched = search_plans(path, {}, profile, options);
  int autos = 0, compared = 0;
  for (const PlanEstimate* e : testing::every_estimate(searched)) {
    if (e->choice.schedule == "-") continue;  // refused before any plan was made (dp does not divide the batch)
    // Every auto plan (the search the cache saves), every third of the others.
    if (e->choice.schedule == "auto") {
      ++autos;
    } else if (compared++ % 3 != 0) {
      continue;
    }
    testing::expect_estimated_alike(estimate_plan(path, {}, e->choice, profile, options), *e);
  }
  EXPECT_GT(autos, 20);  // the search priced auto at several pp, micro-batch counts and layouts
}

TEST_F(ScheduleCache, AWorldNoLayoutCanUseIsRefusedBeforeTheSearchAndTheLargestUsableOneIsSearched) {
  const std::string path = write("world_bound.json", kTiny);
  SearchOptions options;
  // tp 4 (n_heads, a node of 4 ranks) x cp 8 (ring: seq_len 16 in 2 cp chunks; all_to_all would need the 4 / tp
  // heads of a tp rank divisible by cp, so at most tp 1 x cp 4) x pp one block per stage x dp 16 (the global batch).
  const partition::ModelSpec spec = run_plan::model_spec(config::parse_config(kTiny, "<string>", {}).model);
  const auto blocks = static_cast<int>(spec.blocks.size());
  const int most = 4 * 8 * blocks * 16;
  // Above it, down to the bound that counted cp up to seq_len (2 x most, which was searched only to be refused).
  for (const int world : {most * 2, most + 1}) {
    options.world = world;
    try {
      search_plans(path, {}, links(), options);
      ADD_FAILURE() << "world " << world << " searched";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--world " + std::to_string(world) +
                                           " is more ranks than any layout of this config can use: at most " +
                                           std::to_string(most) + " = tp 4 x cp 8 ring"),
                std::string::npos)
          << e.what();
    }
  }
  // At it: searched, and the layout the bound names is one the engine accepts.
  options.world = most;
  const SearchResult at_most = search_plans(path, {}, links(), options);
  bool named = false;
  for (const auto& e : at_most.ranked) {
    named |= e.choice.tp == 4 && e.choice.cp == 8 && e.choice.pp == blocks && e.choice.dp == 16;
  }
  EXPECT_TRUE(named) << at_most.ranked.size() << " plans fit";
}

}  // namespace
}  // namespace cleave::planner::schedule_cache_test
