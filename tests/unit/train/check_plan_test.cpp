// check_plan_before_world (engine/train/rank_setup.hpp): the plan `cleave train` makes before the world, so a config
// over its own device.memory_limit, or one the world size cannot plan, is bad input (InputError: exit 64, which
// `cleave run` does not restart) naming the key, the numbers and the fix; a config that fits passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/config/config.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {
namespace {

// The InputError check_plan_before_world throws for `overrides` of the default config at `world` ranks.
std::string refusal(const std::vector<std::string>& overrides, int world) {
  const config::RunConfig c = config::load_config("", overrides);
  try {
    check_plan_before_world(c, world);
  } catch (const InputError& e) {
    EXPECT_EQ(checkpoint::exit_code_of(e), exit_status(ExitCode::kBadInput));
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

TEST(CheckPlanBeforeWorld, OverTheMemoryCapIsBadInputNamingTheNumbersAndTheFix) {
  const std::string m = refusal({"device.memory_limit=\"4MiB\""}, 1);
  EXPECT_NE(m.find("memory: pp rank 0 needs about"), std::string::npos) << m;
  EXPECT_NE(m.find("but device.memory_limit is 4.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("activations are"), std::string::npos) << m;
  EXPECT_NE(m.find("train.recompute=full needs about"), std::string::npos) << m;
  EXPECT_NE(m.find("cleave plan CONFIG --world N"), std::string::npos) << m;
}

TEST(CheckPlanBeforeWorld, EveryPpRankIsCheckedFromAnyRank) {
  // pp 2: rank 0 holds the embedding and the first blocks; the refusal names the first rank over the cap.
  const std::string m = refusal({"device.memory_limit=\"1MiB\"", "parallel.pipeline_model_parallel_size=2"}, 2);
  EXPECT_NE(m.find("memory: pp rank "), std::string::npos) << m;
  EXPECT_NE(m.find("device.memory_limit is 1.00 MiB"), std::string::npos) << m;
}

TEST(CheckPlanBeforeWorld, AConfigUnderItsCapPasses) {
  EXPECT_NO_THROW(check_plan_before_world(config::load_config("", {"device.memory_limit=\"1GiB\""}), 1));
  EXPECT_NO_THROW(check_plan_before_world(config::load_config("", {}), 1));
  // The hint of the 4 MiB refusal, followed: full recomputation fits.
  EXPECT_NO_THROW(check_plan_before_world(
      config::load_config("", {"device.memory_limit=\"4MiB\"", "train.recompute=full"}), 1));
}

TEST(CheckPlanBeforeWorld, APlanTheWorldCannotMakeIsBadInput) {
  // 2 pp ranks x 4 virtual stages = 8 stages over the 5 blocks of a one-layer GPT.
  const std::string m = refusal({"model.n_layers=1", "parallel.pipeline_model_parallel_size=2",
                                 "parallel.virtual_pipeline_stages=4", "parallel.schedule=interleaved_1f1b"},
                                2);
  EXPECT_NE(m.find("only 5 blocks"), std::string::npos) << m;
}

}  // namespace
}  // namespace cleave::train
