// The measured routing imbalance (docs/planner.md, "The imbalance default"): one step's busiest ep rank's rows over
// the mean from the trainer's moe_ep_rows_* fields, by hand; the record and its file form (round trip, an old profile
// without it, bad entries refused by name); the config `cleave profile` trains for it; and the planner's choice: the
// option, else the profile's figure at its own ep, else the uniform-routing formula, each plan saying which.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/planner/ep_imbalance_default.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/routing_imbalance_measure.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/ep_costs.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::ep_imbalance_default_test {
namespace {

// D 32, F 64, E 8, k 2, two moe blocks; global batch 8 of micro-batch 1.
constexpr const char* kMoe = R"({
  "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16,
            "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

using Fields = std::vector<std::pair<std::string, double>>;

partition::MeasuredRoutingImbalance measured_at(int ep, double figure) {
  return routing_record({figure - 0.1, figure + 0.1}, ep, 4, "by hand");
}

// Block 0: rank 0 receives 30 + 20 = 50 rows, rank 1 10 + 20 = 30: max / mean 50 / 40 = 1.25; block 1 even (1.0).
// The step: 1 + (0.25 + 0) / 2 = 1.125. The other routing fields (bytes, per-micro-batch rows, tokens) do not count.
TEST(RoutingImbalance, OneStepsFigureIsTheMeanExcessOverTheBlocks) {
  const Fields fields = {{"moe_aux_loss", 0.01},          {"moe_tokens_e0", 99},
                         {"moe_ep_rows_b0_s0_d0", 30},    {"moe_ep_rows_b0_s0_d1", 10},
                         {"moe_ep_rows_b0_s1_d0", 20},    {"moe_ep_rows_b0_s1_d1", 20},
                         {"moe_ep_bytes_b0_s0_d0", 1e6},  {"moe_ep_mb_rows_b0_d0", 1e6},
                         {"moe_ep_rows_b1_s0_d0", 25},    {"moe_ep_rows_b1_s0_d1", 15},
                         {"moe_ep_rows_b1_s1_d0", 15},    {"moe_ep_rows_b1_s1_d1", 25},
                         {"moe_ep_mb_mean_rows_b1", 1e6}, {"moe_ep_rows_b1_s1_d1x", 1e6}};
  const std::optional<double> f = step_busiest_over_mean(fields);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(*f, 1.125);
  // Four ranks, one block: rows 40, 0, 0, 0 (every row to rank 0): max / mean = 40 / 10 = 4, the dropless bound.
  EXPECT_DOUBLE_EQ(*step_busiest_over_mean(Fields{{"moe_ep_rows_b3_s0_d0", 40},
                                                  {"moe_ep_rows_b3_s0_d1", 0},
                                                  {"moe_ep_rows_b3_s0_d2", 0},
                                                  {"moe_ep_rows_b3_s0_d3", 0}}),
                   4.0);
}

TEST(RoutingImbalance, NoFigureWithoutRowsOrWithABlockThatReceivedNone) {
  EXPECT_FALSE(step_busiest_over_mean(Fields{{"moe_aux_loss", 0.01}, {"moe_tokens_e0", 12}}).has_value());  // ep 1
  EXPECT_FALSE(step_busiest_over_mean(Fields{{"moe_ep_rows_b0_s0_d0", 0}, {"moe_ep_rows_b0_s0_d1", 0}}).has_value());
}

TEST(RoutingImbalance, TheRecordIsTheMeanOfItsSteps) {
  const partition::MeasuredRoutingImbalance m = routing_record({1.2, 1.3, 1.5}, 2, 8, "how");
  EXPECT_DOUBLE_EQ(m.busiest_over_mean, 4.0 / 3.0);
  EXPECT_EQ(m.steps, 3);
  EXPECT_EQ(m.ep, 2);
  EXPECT_EQ(m.micro_batch, 8);
  EXPECT_EQ(m.source, "how");
  EXPECT_THROW(routing_record({}, 2, 8, "how"), Error);
}

// The run `cleave profile` trains: the config at ep = dp = ranks, nothing else split, its batch and seed kept.
TEST(RoutingImbalance, TheMeasuredRunIsTheConfigAtEpEqualToTheRanks) {
  const config::RunConfig base =
      config::parse_config(kMoe, "<string>", {"parallel.tensor_model_parallel_size=2", "optimizer.zero_stage=2",
                                              "train.seed=77", "batch.micro_batch_size=2"});
  std::string why;
  const auto run = routing_run_config(base, 2, 5, why);
  ASSERT_TRUE(run.has_value()) << why;
  EXPECT_EQ(run->parallel.expert_model_parallel_size, 2);
  EXPECT_EQ(run->parallel.data_parallel_size, 2);
  EXPECT_EQ(run->parallel.tensor_model_parallel_size, 1);
  EXPECT_EQ(run->parallel.pipeline_model_parallel_size, 1);
  EXPECT_EQ(run->optimizer.zero_stage, 0);
  EXPECT_EQ(run->train.steps, 5);
  EXPECT_EQ(run->train.seed, 77u);
  EXPECT_EQ(run->train.eval_batches, 0);
  EXPECT_EQ(run->resolved_batch().global_batch_size, 8);
  EXPECT_EQ(run->resolved_batch().micro_batch_size, 2);
  EXPECT_EQ(run->resolved_batch().gradient_accumulation_steps, 2);
  // Where ep = ranks cannot run it, a reason naming the numbers.
  EXPECT_FALSE(routing_run_config(base, 3, 5, why).has_value());
  EXPECT_NE(why.find("n_experts 8 does not split over the profile's 3 ranks"), std::string::npos) << why;
  EXPECT_FALSE(routing_run_config(base, 1, 5, why).has_value());
  EXPECT_NE(why.find("one rank"), std::string::npos) << why;
  EXPECT_FALSE(routing_run_config(config::parse_config(kMoe, "<string>", {"batch.micro_batch_size=4"}), 4, 5, why)
                   .has_value());
  EXPECT_NE(why.find("does not resolve"), std::string::npos) << why;  // global 8 over 4 ranks of micro-batch 4
  const config::RunConfig dense = config::parse_config(
      R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16}})",
      "<string>", {});
  EXPECT_FALSE(routing_run_config(dense, 2, 5, why).has_value());
  EXPECT_NE(why.find("no routed experts"), std::string::npos) << why;
}

// The planner's choice, pure: 1 at ep 1; the option; the profile's figure at its own ep only; else the formula.
TEST(EpImbalanceDefault, OptionThenTheProfilesFigureAtItsEpThenTheFormula) {
  const config::RunConfig c = config::parse_config(kMoe, "<string>", {});
  const partition::ModelSpec spec = run_plan::model_spec(c.model);
  const std::optional<partition::MeasuredRoutingImbalance> measured = measured_at(2, 1.4);
  EpImbalance f = choose_ep_imbalance(0, measured, spec, 1, 1, 1);
  EXPECT_EQ(f.value, 1.0);
  EXPECT_EQ(f.source, EpImbalanceSource::kNone);
  f = choose_ep_imbalance(1.25, measured, spec, 1, 1, 2);
  EXPECT_EQ(f.value, 1.25);
  EXPECT_EQ(f.source, EpImbalanceSource::kOption);
  f = choose_ep_imbalance(0, measured, spec, 1, 1, 2);
  EXPECT_DOUBLE_EQ(f.value, 1.4);
  EXPECT_EQ(f.source, EpImbalanceSource::kProfile);
  f = choose_ep_imbalance(0, measured, spec, 8, 2, 2);  // at any micro-batch and cp: the step's rows
  EXPECT_DOUBLE_EQ(f.value, 1.4);
  f = choose_ep_imbalance(0, measured, spec, 1, 1, 4);  // another ep: the formula
  EXPECT_EQ(f.value, partition::workload_ep_imbalance(spec, 1, 1, 4));
  EXPECT_EQ(f.source, EpImbalanceSource::kWorkload);
  EXPECT_NE(describe_ep_imbalance(f, measured).find("the profile measured ep2 only"), std::string::npos);
  f = choose_ep_imbalance(0, std::nullopt, spec, 1, 1, 2);
  EXPECT_EQ(f.value, partition::workload_ep_imbalance(spec, 1, 1, 2));
  EXPECT_EQ(f.source, EpImbalanceSource::kWorkload);
  EXPECT_LT(f.value, 1.4);
  EXPECT_EQ(describe_ep_imbalance({1.4, EpImbalanceSource::kProfile}, measured),
            "measured by cleave profile: ep2, 2 steps of the config's training at micro-batch 4");
}

class RoutingImbalanceProfile : public testing::ScratchDirTest {
 protected:
  RoutingImbalanceProfile() : ScratchDirTest("cleave_routing_imbalance_test_") {}
  static HardwareProfile profile() {
    const Link link{1e-5, 1e8};
    return testing::synthetic_profile(1e9, 1e10, link, link, 8);
  }
  std::string saved(const nlohmann::json& j, const std::string& name) {
    std::ofstream((dir_ / name).string()) << j.dump(2);
    return (dir_ / name).string();
  }
};

TEST_F(RoutingImbalanceProfile, RoundTripsAndAnOldProfileReadsWithoutOne) {
  HardwareProfile p = profile();
  p.routing_imbalance = routing_record({1.21, 1.28, 1.33}, 2, 8, "measured by hand");
  const HardwareProfile loaded = load_profile(saved(profile_to_json(p), "new.json"));
  ASSERT_TRUE(loaded.routing_imbalance.has_value());
  EXPECT_EQ(routing_imbalance_to_json(*loaded.routing_imbalance).dump(),
            routing_imbalance_to_json(*p.routing_imbalance).dump());
  EXPECT_EQ(loaded.routing_imbalance->ep, 2);
  EXPECT_EQ(loaded.routing_imbalance->steps, 3);
  EXPECT_NEAR(loaded.routing_imbalance->busiest_over_mean, (1.21 + 1.28 + 1.33) / 3, 1e-8);
  // Read and written again, the same text (the reader adds this machine's cores to a cpu profile, so not p's).
  EXPECT_EQ(profile_to_json(load_profile(saved(profile_to_json(loaded), "again.json"))).dump(),
            profile_to_json(loaded).dump());
  auto old = profile_to_json(p);  // as written before 2026-12-01 (w)
  old.erase("routing_imbalance");
  const HardwareProfile before = load_profile(saved(old, "old.json"));
  EXPECT_FALSE(before.routing_imbalance.has_value());
}

TEST_F(RoutingImbalanceProfile, ABadRecordIsRefusedByName) {
  HardwareProfile p = profile();
  p.routing_imbalance = routing_record({1.2, 1.3}, 2, 8, "measured by hand");
  const auto refused = [&](const char* key, const nlohmann::json& value, const std::string& expected) {
    auto j = profile_to_json(p);
    j["routing_imbalance"][key] = value;
    try {
      load_profile(saved(j, "bad.json"));
      ADD_FAILURE() << key << " = " << value.dump() << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused("busiest_over_mean", 0.9, "routing_imbalance: 'busiest_over_mean' is 0.9, must be a finite number >= 1");
  refused("ep", 1, "routing_imbalance: 'ep' is 1, must be >= 2");
  refused("per_step", nlohmann::json::array({1.2}), "routing_imbalance: 'per_step' must be a list of 2 figures");
  refused("per_step", nlohmann::json::array({1.2, 0.5}), "routing_imbalance: per_step[1] is 0.5");
  refused("source", "", "routing_imbalance: needs a non-empty string 'source'");
}

// A plan at the profile's ep is priced at its figure, the same step as the option at that figure; at another ep at
// the formula; the option overrides both; each estimate says which.
TEST_F(RoutingImbalanceProfile, PlansTakeTheProfilesFigureAtItsEpOnly) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile measured = profile();
  measured.routing_imbalance = measured_at(2, 1.6);
  PlanChoice c = choice_of_config(config, {}, 4);
  c.ep = 2;
  SearchOptions options{4, 0};
  const PlanEstimate e = estimate_plan(config, {}, c, measured, options);
  ASSERT_TRUE(e.valid) << e.reason;
  EXPECT_DOUBLE_EQ(e.ep_imbalance, 1.6);
  EXPECT_EQ(e.ep_imbalance_source, EpImbalanceSource::kProfile);
  SearchOptions given = options;
  given.ep_imbalance = 1.6;
  const PlanEstimate by_option = estimate_plan(config, {}, c, profile(), given);
  EXPECT_EQ(by_option.ep_imbalance_source, EpImbalanceSource::kOption);
  EXPECT_EQ(e.step_s, by_option.step_s);
  EXPECT_EQ(e.ep_all_to_all_s, by_option.ep_all_to_all_s);
  const PlanEstimate formula = estimate_plan(config, {}, c, profile(), options);  // no figure in the profile
  EXPECT_EQ(formula.ep_imbalance_source, EpImbalanceSource::kWorkload);
  EXPECT_LT(formula.ep_imbalance, 1.6);
  EXPECT_LT(formula.step_s, e.step_s);
  c.ep = 4;
  const PlanEstimate four = estimate_plan(config, {}, c, measured, options);
  ASSERT_TRUE(four.valid) << four.reason;
  EXPECT_EQ(four.ep_imbalance_source, EpImbalanceSource::kWorkload);
  EXPECT_EQ(four.ep_imbalance, partition::workload_ep_imbalance(run_plan::model_spec(config::parse_config(kMoe, "<string>", {}).model), 1, 1, 4));
  given.ep_imbalance = 1.1;
  c.ep = 2;
  const PlanEstimate overridden = estimate_plan(config, {}, c, measured, given);
  EXPECT_DOUBLE_EQ(overridden.ep_imbalance, 1.1);
  EXPECT_EQ(overridden.ep_imbalance_source, EpImbalanceSource::kOption);
  c.ep = 1;
  EXPECT_EQ(estimate_plan(config, {}, c, measured, options).ep_imbalance_source, EpImbalanceSource::kNone);
}

}  // namespace
}  // namespace cleave::planner::ep_imbalance_default_test
