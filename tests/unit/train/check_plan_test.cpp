// plan_before_world (engine/train/rank_setup.hpp): the plan `cleave train` makes before the world, so a config over
// its own device.memory_limit, one the world size cannot plan, or one whose ranks on this host need more than its
// memory allows (physical or a cgroup's limit; the host injected here: no test reads this machine's memory) is bad
// input (InputError: exit 64, which `cleave run` does not restart) naming the key, the numbers and the fix; a config
// that fits passes, and the plan it returns is the one the rank setup would make (so the trainer takes it instead of
// making it again).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/config/config.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"
#include "engine/run_plan/host_fit.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train::check_plan_test {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// plan_before_world without its result (a config that passes).
void check_plan_before_world(const config::RunConfig& config, int world, const run_plan::HostMemory& host = {},
                             const std::vector<std::string>& overrides = {}) {
  static_cast<void>(plan_before_world(config, world, "<defaults>", overrides, host));
}

// The InputError plan_before_world throws for `overrides` of the default config at `world` ranks.
std::string refusal(const std::vector<std::string>& overrides, int world, const run_plan::HostMemory& host = {}) {
  const config::RunConfig c = config::load_config("", overrides);
  try {
    check_plan_before_world(c, world, host, overrides);
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

// The stage count's refusal names its key with where it came from, as the config reader's refusals do: the virtual
// stages where the config sets them, else the pp size (the schedule's default virtual stages beside it).
TEST(CheckPlanBeforeWorld, TooManyStagesNamesTheKeyAndWhereItCameFrom) {
  const std::string m = refusal({"model.n_layers=1", "parallel.pipeline_model_parallel_size=2",
                                 "parallel.virtual_pipeline_stages=4", "parallel.schedule=interleaved_1f1b"},
                                2);
  EXPECT_EQ(m.rfind("--set parallel.virtual_pipeline_stages=4: parallel.virtual_pipeline_stages: 8 pipeline stages "
                    "(pipeline_model_parallel_size 2 x virtual stages 4) but the model has only 5 blocks",
                    0),
            0u)
      << m;
  const std::string pp = refusal({"model.n_layers=1", "parallel.pipeline_model_parallel_size=3",
                                  "parallel.schedule=zb_v"},
                                 3);
  EXPECT_EQ(pp.rfind("--set parallel.pipeline_model_parallel_size=3: parallel.pipeline_model_parallel_size: 6 "
                     "pipeline stages (pipeline_model_parallel_size 3 x virtual stages 2)",
                     0),
            0u)
      << pp;
  // From a file: "config FILE: key: ...".
  const config::RunConfig c = config::load_config("", {"model.n_layers=1", "parallel.pipeline_model_parallel_size=6"});
  try {
    static_cast<void>(plan_before_world(c, 6, "run.json", {}));
    ADD_FAILURE() << "6 stages over 5 blocks accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("config run.json: parallel.pipeline_model_parallel_size: 6 pipeline stages", 0),
              0u)
        << e.what();
  }
}

// The stage count's refusal says what the family's blocks are and which key adds more, in the family's words (the
// family table's), not a language model's for a classifier.
TEST(CheckPlanBeforeWorld, TooManyStagesNamesTheFamilysBlocks) {
  struct Case {
    std::vector<std::string> overrides;
    int world;
    std::string blocks, deeper;
  };
  const Case cases[] = {
      {{"model.n_layers=1", "parallel.pipeline_model_parallel_size=6"}, 6,
       "only 5 blocks (a gpt model's: its embedding, the model.n_layers transformer blocks, final norm, head and loss)",
       "or a model 1 block deeper (model.n_layers)"},
      // The default mlp: (linear, relu) x 2, the linear to the classes, the loss.
      {{"model.type=mlp", "parallel.pipeline_model_parallel_size=7"}, 7,
       "only 6 blocks (an mlp model's: a linear and an activation per model.hidden entry, the linear to the classes "
       "and the loss)",
       "or a model 1 block deeper (model.hidden, 2 blocks per entry)"},
      // The default cnn: (conv2d, relu, max-pool) x 2, flatten, linear, loss.
      {{"model.type=cnn", "parallel.pipeline_model_parallel_size=10"}, 10,
       "only 9 blocks (a cnn model's: a conv2d, relu and max-pool per model.channels entry, flatten, the linear to "
       "the classes and the loss)",
       "or a model 1 block deeper (model.channels, 3 blocks per entry)"},
  };
  for (const Case& c : cases) {
    const std::string m = refusal(c.overrides, c.world);
    EXPECT_NE(m.find(c.blocks), std::string::npos) << m;
    EXPECT_NE(m.find(c.deeper), std::string::npos) << m;
    EXPECT_EQ(m.find("language model"), std::string::npos) << m;
  }
}

// A model far past any machine's memory (about 800 TiB of parameters, gradients and AdamW state), with no
// device.memory_limit: refused before the world, naming the rank count, the need, the host's figure and its source.
TEST(CheckPlanBeforeWorld, RanksPastTheHostsPhysicalMemoryAreBadInput) {
  const std::vector<std::string> huge = {"model.d_model=65536", "model.n_layers=1024", "model.n_heads=64"};
  const std::string m = refusal(huge, 2, {64 * kGiB, "its physical memory, MemTotal in /proc/meminfo", 2});
  EXPECT_NE(m.find("memory: the 2 ranks on this host need "), std::string::npos) << m;
  EXPECT_NE(m.find(" GiB of host memory (the memory plan: 2 ranks x about "), std::string::npos) << m;
  EXPECT_NE(m.find("this host allows 64.00 GiB of memory (its physical memory, MemTotal in /proc/meminfo) and a run "
                   "may plan 90% of it, 57.60 GiB"),
            std::string::npos)
      << m;
  // Under a cap it fits neither: the cap's refusal (per rank) comes first.
  EXPECT_NE(refusal({"model.d_model=65536", "model.n_layers=1024", "model.n_heads=64", "device.memory_limit=\"1TiB\""},
                    1, {64 * kGiB, "test", 1})
                .find("but device.memory_limit is 1024.00 GiB"),
            std::string::npos);
  // An unknown host (limit_bytes 0) is not checked.
  EXPECT_NO_THROW(check_plan_before_world(config::load_config("", huge), 1));
}

TEST(CheckPlanBeforeWorld, TheDefaultModelFitsAHostAndNotAMebibyte) {
  EXPECT_NO_THROW(check_plan_before_world(config::load_config("", {}), 2, {kGiB, "test", 2}));
  const std::string m = refusal({}, 2, {std::int64_t{1} << 20, "test", 2});
  EXPECT_NE(m.find("memory: the 2 ranks on this host need "), std::string::npos) << m;
  EXPECT_NE(m.find("this host allows 1.00 MiB of memory (test)"), std::string::npos) << m;
}

// The plan it returns is make_plan's for the same config (the trainer takes it); pp rank 1's stages are set by the
// rank setup from the same plan.
TEST(CheckPlanBeforeWorld, ReturnsThePlanTheRankSetupWouldMake) {
  config::RunConfig c = config::load_config("", {"parallel.pipeline_model_parallel_size=2"});
  const run_plan::Plan before = plan_before_world(c, 2, "<defaults>", {}, {kGiB, "test", 2});
  c.resolve(2);
  const int micro = static_cast<int>(c.resolved_batch().gradient_accumulation_steps);
  for (int pp_rank = 0; pp_rank < 2; ++pp_rank) {
    const run_plan::Plan made = run_plan::make_plan(c, micro, pp_rank, cpu_kernels_of(c));
    EXPECT_EQ(before.describe_partition(), made.describe_partition());
    EXPECT_EQ(before.schedule.num_microbatches, made.schedule.num_microbatches);
    EXPECT_EQ(before.schedule.ranks.size(), made.schedule.ranks.size());
    EXPECT_EQ(before.stages_on(pp_rank), made.local_stages) << pp_rank;
    EXPECT_FALSE(made.local_stages.empty());
  }
}

}  // namespace
}  // namespace cleave::train::check_plan_test
