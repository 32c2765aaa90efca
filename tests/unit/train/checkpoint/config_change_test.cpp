// Resuming with a changed config (engine/train/checkpoint/config_change.hpp): which keys change freely, which are
// refused without --allow-config-change, the message (every refused key with both values, the flag, the values to set
// back) and that a typo in the allow list allows nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/checkpoint/config_change.hpp"

namespace cleave::train::config_change_test {
namespace {

using nlohmann::json;

json base() {
  return json::parse(R"({"model": {"type": "gpt", "d_model": 32},
                         "parallel": {"pipeline_model_parallel_size": 1, "partition": {"method": "cost"}},
                         "batch": {"global_batch_size": 8, "micro_batch_size": 2, "gradient_accumulation_steps": 4},
                         "optimizer": {"type": "adamw", "lr": 0.003, "betas": [0.9, 0.95], "zero_stage": 0},
                         "train": {"steps": 12, "seed": 7, "log_interval": 10, "out_dir": "a"},
                         "checkpoint": {"interval": 4}, "data": {"type": "text", "path": "x.txt"}})");
}

std::string error_of(const std::vector<ConfigChange>& changes, const std::vector<std::string>& allowed,
                     const json& after) {
  try {
    check_config_changes(changes, allowed, after, "run/step_0000004");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(ConfigChange, SameConfigHasNoChanges) { EXPECT_TRUE(config_changes(base(), base()).empty()); }

TEST(ConfigChange, LengthCadenceAndLayoutChangeFreely) {
  json after = base();
  after["train"]["steps"] = 40;
  after["train"]["log_interval"] = 1;
  after["train"]["out_dir"] = "b";
  after["checkpoint"]["interval"] = 2;
  after["parallel"]["pipeline_model_parallel_size"] = 2;
  after["parallel"]["partition"]["method"] = "uniform";
  after["batch"]["micro_batch_size"] = 4;
  after["batch"]["gradient_accumulation_steps"] = 2;
  after["optimizer"]["zero_stage"] = 1;
  const auto changes = config_changes(base(), after);
  ASSERT_EQ(changes.size(), 9u);
  for (const auto& c : changes) EXPECT_TRUE(c.free) << c.key;
  EXPECT_EQ(error_of(changes, {}, after), "");
  EXPECT_EQ(changes[0].describe(), "batch.gradient_accumulation_steps 4 -> 2");  // by key
}

TEST(ConfigChange, TrainingChangesAreRefusedNamingEveryKeyBothValuesAndTheFlag) {
  json after = base();
  after["optimizer"]["lr"] = 0.001;
  after["optimizer"]["betas"] = {0.9, 0.99};
  after["data"]["path"] = "y.txt";
  after["train"]["steps"] = 20;  // free: not in the message
  const auto changes = config_changes(base(), after);
  ASSERT_EQ(changes.size(), 4u);
  const std::string e = error_of(changes, {}, after);
  EXPECT_NE(e.find("--resume run/step_0000004: the config differs"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.lr 0.003 -> 0.001"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.betas [0.9,0.95] -> [0.9,0.99]"), std::string::npos) << e;
  EXPECT_NE(e.find("data.path \"x.txt\" -> \"y.txt\""), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-config-change data.path,optimizer.betas,optimizer.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("--set optimizer.lr=0.003"), std::string::npos) << e;
  EXPECT_EQ(e.find("train.steps"), std::string::npos) << e;
  // Allowing some of them leaves the rest refused; allowing all passes.
  const std::string partly = error_of(changes, {"optimizer.lr"}, after);
  EXPECT_EQ(partly.find("optimizer.lr 0.003"), std::string::npos) << partly;
  EXPECT_NE(partly.find("data.path"), std::string::npos) << partly;
  EXPECT_EQ(error_of(changes, {"optimizer.lr", "optimizer.betas", "data.path"}, after), "");
}

TEST(ConfigChange, AnAllowListTypoAllowsNothing) {
  json after = base();
  after["optimizer"]["lr"] = 0.001;
  const std::string e = error_of(config_changes(base(), after), {"optimizer.lrr"}, after);
  EXPECT_NE(e.find("--allow-config-change: 'optimizer.lrr' is not a config key"), std::string::npos) << e;
}

// The allow list alone, checked before any work (cleave train, cleave run): a typo is bad input (InputError, exit
// ExitCode::kBadInput, never restarted), naming each unknown entry and the nearest key, else its section's keys.
TEST(ConfigChange, AllowListTyposAreBadInputWithTheNearestKey) {
  EXPECT_NO_THROW(check_allowed_keys({}, base()));
  EXPECT_NO_THROW(check_allowed_keys({"optimizer.lr", "data.path", "train.steps"}, base()));
  std::string message;
  try {
    check_allowed_keys({"optimizer.lr", "optimizer.lrr", "data.pth", "optimizer.zzzzzzzz", "lr", "optimizer"}, base());
  } catch (const InputError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("--allow-config-change: 'optimizer.lrr' is not a config key (did you mean optimizer.lr?)"),
            std::string::npos) << message;
  EXPECT_NE(message.find("'data.pth' is not a config key (did you mean data.path?)"), std::string::npos) << message;
  EXPECT_NE(message.find("'optimizer.zzzzzzzz' is not a config key (the keys of optimizer are optimizer.betas, "
                         "optimizer.lr, optimizer.type, optimizer.zero_stage)"),
            std::string::npos) << message;
  EXPECT_NE(message.find("'lr' is not a config key (give full key paths"), std::string::npos) << message;
  // A section is no key: the flag allows leaves, as config.json writes them.
  EXPECT_NE(message.find("'optimizer' is not a config key"), std::string::npos) << message;
  EXPECT_EQ(message.find("'optimizer.lr' is not"), std::string::npos) << message;
}

// The keys the loader checks cannot change, flag or not: naming one in the allow list would allow nothing, so it is
// bad input before any work, as a typo is (it once passed, and the resume then failed at the load with exit 78).
TEST(ConfigChange, AllowingAKeyThatCannotChangeIsBadInput) {
  json config = base();
  config["model"]["aux_loss_coef"] = 0.01;
  config["model"]["n_experts"] = 4;
  for (const std::string key : {"model.n_experts", "model.d_model", "train.seed", "batch.global_batch_size",
                                "optimizer.type"}) {
    std::string message;
    try {
      check_allowed_keys({"optimizer.lr", key}, config);
    } catch (const InputError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("--allow-config-change: '" + key + "' cannot change on a resume, allowed or not"),
              std::string::npos) << key << ": " << message;
    EXPECT_EQ(message.find("optimizer.lr"), std::string::npos) << message;
  }
  // Keys of the same sections that may change with the flag still pass: the model's training coefficients too.
  EXPECT_NO_THROW(check_allowed_keys({"optimizer.lr", "optimizer.betas", "train.log_interval", "batch.micro_batch_size",
                                      "model.aux_loss_coef"},
                                     config));
}

// The MoE loss coefficients and the bias step are training arguments (config/model_training_keys.hpp), as in
// Megatron: a resume that changes one is refused without the flag, naming it, and accepted with it; an
// architecture key of the same section is still left to the loader, flag or not.
TEST(ConfigChange, ModelTrainingCoefficientsChangeWithTheFlag) {
  json before = base();
  before["model"] = {{"type", "moe"}, {"n_experts", 4}, {"top_k", 2}, {"aux_loss_coef", 0.01}, {"z_loss_coef", 0.0},
                     {"bias_update_rate", 0.001}};
  json after = before;
  after["model"]["aux_loss_coef"] = 0.1;
  after["model"]["z_loss_coef"] = 0.001;
  after["model"]["bias_update_rate"] = 0.002;
  const auto changes = config_changes(before, after);
  ASSERT_EQ(changes.size(), 3u);
  for (const auto& c : changes) EXPECT_FALSE(c.free) << c.key;
  const std::string e = error_of(changes, {}, after);
  EXPECT_NE(e.find("model.aux_loss_coef 0.01 -> 0.1"), std::string::npos) << e;
  EXPECT_NE(e.find("model.z_loss_coef 0.0 -> 0.001"), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-config-change model.aux_loss_coef,model.bias_update_rate,model.z_loss_coef"),
            std::string::npos) << e;
  EXPECT_NE(e.find("--set model.aux_loss_coef=0.01"), std::string::npos) << e;
  const std::string partly = error_of(changes, {"model.aux_loss_coef"}, after);
  EXPECT_EQ(partly.find("model.aux_loss_coef"), std::string::npos) << partly;
  EXPECT_NE(partly.find("model.z_loss_coef"), std::string::npos) << partly;
  EXPECT_EQ(error_of(changes, {"model.aux_loss_coef", "model.z_loss_coef", "model.bias_update_rate"}, after), "");
  // The architecture is not a training argument: left to the loader, and refused in the flag.
  after["model"]["top_k"] = 1;
  EXPECT_EQ(error_of(config_changes(before, after),
                     {"model.aux_loss_coef", "model.z_loss_coef", "model.bias_update_rate"}, after),
            "");
  EXPECT_THROW(check_allowed_keys({"model.top_k"}, after), InputError);
}

TEST(ConfigChange, KeysTheLoaderChecksAreLeftToIt) {
  json after = base();
  after["model"]["d_model"] = 64;
  after["train"]["seed"] = 8;
  const auto changes = config_changes(base(), after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[0].free);
  EXPECT_EQ(error_of(changes, {}, after), "");  // the loader refuses these with its own message
}

TEST(ConfigChange, AddedAndRemovedKeys) {
  json before = base();
  before["data"]["val_path"] = "v.txt";
  json after = base();
  after["optimizer"]["min_lr"] = 0.0001;
  const auto changes = config_changes(before, after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].describe(), "optimizer.min_lr absent -> 0.0001");
  EXPECT_EQ(changes[1].describe(), "data.val_path \"v.txt\" -> absent");
}

TEST(ConfigChange, SplitKeyList) {
  EXPECT_EQ(split_key_list("optimizer.lr,,data.path"), (std::vector<std::string>{"optimizer.lr", "data.path"}));
  EXPECT_TRUE(split_key_list("").empty());
}

}  // namespace
}  // namespace cleave::train::config_change_test
