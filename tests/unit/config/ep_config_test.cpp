// parallel.expert_model_parallel_size (issue 36 parts 1 and 8): the key read and written back, and bad input
// refused while the config is read or resolved, before any work, with one error naming the key and the numbers:
// experts not divisible by ep, ep not dividing the dp × cp ranks (at resolve, when the world size gives dp, and
// at read when parallel.data_parallel_size is set), ep on a dense model, and ZeRO-2/3 with ep (not supported
// yet); ep with tp (expert tensor parallelism) accepted.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/config/config.hpp"

namespace cleave::config::ep_config_test {
namespace {

const std::string kMoe = R"({"model": {"type": "moe", "d_model": 32, "n_heads": 4, "n_experts": 4, "top_k": 2}})";

std::string error_of(const std::string& text, const std::vector<std::string>& overrides, int world = 0) {
  try {
    RunConfig c = parse_config(text, "run.json", overrides);
    if (world > 0) c.resolve(world);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void expect_error(const std::string& message, const std::vector<std::string>& needles) {
  ASSERT_FALSE(message.empty()) << "no error";
  EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
  for (const auto& needle : needles) {
    EXPECT_NE(message.find(needle), std::string::npos) << "message lacks '" << needle << "': " << message;
  }
}

TEST(EpConfig, ReadsResolvesAndRoundTrips) {
  RunConfig c = parse_config(kMoe, "run.json", {"parallel.expert_model_parallel_size=2"});
  EXPECT_EQ(c.parallel.expert_model_parallel_size, 2);
  EXPECT_EQ(parse_config(to_json(c), "again"), c);
  EXPECT_NE(to_json(c).find("\"expert_model_parallel_size\": 2"), std::string::npos);
  c.resolve(4);  // dp 4, ep 2: expert-dp 2
  EXPECT_EQ(c.parallel.data_parallel_size, 4);
  EXPECT_EQ(parse_config("{}").parallel.expert_model_parallel_size, 1);
}

TEST(EpConfig, ExpertsNotDivisibleByEpAreRefused) {
  expect_error(error_of(kMoe, {"parallel.expert_model_parallel_size=3"}),
               {"parallel.expert_model_parallel_size", "3 does not divide model.n_experts 4", "{1, 2, 4}"});
}

// The sizes the message offers pass every rule it knows: with parallel.data_parallel_size set, ep 4 (a divisor of
// the experts) does not divide dp 2 and is not offered (following the hint once led to a second error).
TEST(EpConfig, ExpertsNotDivisibleOffersOnlySizesTheSetDpAllows) {
  const std::string message =
      error_of(kMoe, {"parallel.expert_model_parallel_size=3", "parallel.data_parallel_size=2"});
  expect_error(message, {"3 does not divide model.n_experts 4", "must divide the dp × cp = 2 ranks",
                         "use expert_model_parallel_size in {1, 2}"});
  EXPECT_EQ(message.find("{1, 2, 4}"), std::string::npos) << message;
}

TEST(EpConfig, EpNotDividingDpTimesCpIsRefused) {
  // At resolve: 6 ranks give dp 6, which 4 does not divide.
  expect_error(error_of(kMoe, {"parallel.expert_model_parallel_size=4"}, 6),
               {"parallel.expert_model_parallel_size", "4 does not divide the dp × cp = 6 × 1 = 6 ranks", "{1, 2}"});
  // At read, when dp is set: dp 2 × cp 1 cannot hold ep 4.
  expect_error(error_of(kMoe, {"parallel.expert_model_parallel_size=4", "parallel.data_parallel_size=2"}),
               {"parallel.expert_model_parallel_size", "dp × cp = 2 × 1 = 2"});
  // pp ranks are not dp ranks: 4 ranks at pp 2 leave dp 2.
  expect_error(error_of(kMoe, {"parallel.expert_model_parallel_size=4", "parallel.pipeline_model_parallel_size=2"}, 4),
               {"parallel.expert_model_parallel_size", "2 × 1 = 2"});
}

// ep × tp (expert tensor parallelism) composes: each ep rank's experts are split over tp (docs/multi-rank.md).
TEST(EpConfig, EpWithTensorParallelismIsAccepted) {
  EXPECT_EQ(error_of(kMoe, {"parallel.expert_model_parallel_size=2", "parallel.tensor_model_parallel_size=2"}, 4), "");
  EXPECT_EQ(error_of(kMoe, {"parallel.expert_model_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                            "parallel.sequence_parallel=true"}, 4),
            "");
  // ep still folds out of dp × cp only: tp 2 of 4 ranks leaves dp 2, too few for ep 4.
  expect_error(error_of(kMoe, {"parallel.expert_model_parallel_size=4", "parallel.tensor_model_parallel_size=2"}, 4),
               {"parallel.expert_model_parallel_size", "2 × 1 = 2"});
}

TEST(EpConfig, EpOnADenseModelIsRefused) {
  expect_error(error_of(R"({"model": {"type": "llama", "d_model": 32, "n_heads": 4}})",
                        {"parallel.expert_model_parallel_size=2"}),
               {"parallel.expert_model_parallel_size", "2", "has none", "set it to 1"});
  expect_error(error_of("{}", {"parallel.expert_model_parallel_size=2"}), {"parallel.expert_model_parallel_size"});
}

// ZeRO 0-3 all compose with ep: expert parameters shard over the expert-dp group, the rest over dp × cp
// (engine/train/data_parallel.hpp); nothing to refuse.
TEST(EpConfig, EveryZeroStageIsAcceptedWithEp) {
  for (const char* stage : {"optimizer.zero_stage=0", "optimizer.zero_stage=1", "optimizer.zero_stage=2",
                            "optimizer.zero_stage=3"}) {
    EXPECT_EQ(error_of(kMoe, {"parallel.expert_model_parallel_size=2", stage}), "") << stage;
  }
}

// parallel.ep_stash_imbalance and ep_peak_imbalance (the trainer's ep memory figures): 0 by default (the dropless
// bound), read and written back; refused before any work below 1, above the bound min(k, E/ep) · ep / k (here E 4,
// k 2: 2 at ep 2, 1 at ep 1), with the peak below the stash, or on a model without experts, each error naming the
// key, the value, the bound and the fix.
TEST(EpConfig, MemoryFiguresAreReadWrittenAndBoundedByTheDroplessBound) {
  const RunConfig none = parse_config(kMoe, "run.json", {"parallel.expert_model_parallel_size=2"});
  EXPECT_EQ(none.parallel.ep_stash_imbalance, 0.0);
  EXPECT_EQ(none.parallel.ep_peak_imbalance, 0.0);
  const RunConfig c = parse_config(kMoe, "run.json", {"parallel.expert_model_parallel_size=2",
                                                      "parallel.ep_stash_imbalance=1.25",
                                                      "parallel.ep_peak_imbalance=2"});
  EXPECT_EQ(c.parallel.ep_stash_imbalance, 1.25);
  EXPECT_EQ(c.parallel.ep_peak_imbalance, 2.0);
  EXPECT_EQ(parse_config(to_json(c), "again"), c);
  EXPECT_NE(to_json(c).find("\"ep_stash_imbalance\": 1.25"), std::string::npos);
  const std::string ep2 = "parallel.expert_model_parallel_size=2";
  expect_error(error_of(kMoe, {ep2, "parallel.ep_peak_imbalance=2.5"}),
               {"parallel.ep_peak_imbalance", "2.5 is above the dropless bound 2", "expert_model_parallel_size 2",
                "model.n_experts 4", "model.top_k 2", "give a value in [1, 2], or 0 for the bound"});
  expect_error(error_of(kMoe, {ep2, "parallel.ep_stash_imbalance=0.5"}),
               {"parallel.ep_stash_imbalance", "0.5 is below 1", "or 0 for the dropless bound 2"});
  expect_error(error_of(kMoe, {ep2, "parallel.ep_stash_imbalance=1.5", "parallel.ep_peak_imbalance=1.25"}),
               {"parallel.ep_peak_imbalance", "1.25 is below parallel.ep_stash_imbalance 1.5"});
  expect_error(error_of(R"({"model": {"type": "llama", "d_model": 32, "n_heads": 4}})",
                        {"parallel.ep_peak_imbalance=1.5"}),
               {"parallel.ep_peak_imbalance", "model.type llama has no experts", "drop the key"});
  expect_error(error_of(kMoe, {ep2, "parallel.ep_peak_imbalance=-1"}), {"parallel.ep_peak_imbalance"});
}

// At ep 1 the keys size nothing (every rank holds every expert; the plan reads neither): any value but 0 is refused
// alike, 1 included (it was accepted there while 1.5 was refused as above the bound 1), naming the key, the value,
// expert_model_parallel_size 1 and the fix; 0 (the default) is still accepted.
TEST(EpConfig, MemoryFiguresAtEpOneAreRefusedWhateverTheirValue) {
  for (const std::string key : {"parallel.ep_stash_imbalance", "parallel.ep_peak_imbalance"}) {
    for (const std::string value : {"1", "1.5", "0.5"}) {
      expect_error(error_of(kMoe, {key + "=" + value}),
                   {key + ": " + value + " sizes the routed rows expert parallelism sends a rank",
                    "parallel.expert_model_parallel_size is 1", "set expert_model_parallel_size > 1, or remove the key"});
      expect_error(error_of(kMoe, {"parallel.expert_model_parallel_size=1", key + "=" + value}), {key, "is 1"});
    }
    EXPECT_EQ(error_of(kMoe, {key + "=0"}), "") << key;
    EXPECT_EQ(error_of(kMoe, {"parallel.expert_model_parallel_size=2", key + "=1"}), "") << key;
  }
}

}  // namespace
}  // namespace cleave::config::ep_config_test
