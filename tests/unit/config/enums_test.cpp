// The config's enum name tables (engine/config/enums.hpp, engine/core/enum_names.hpp): every value of every
// enum-valued key round-trips through its name, through the config reader and through to_json; an unknown
// name is refused with the key and every allowed name; validate() runs on a RunConfig edited in code.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::config::enums_test {
namespace {

// Every table: names unique, each value's name maps back to it, parse_enum and fmt agree with the table.
template <NamedEnum E>
void expect_round_trip(std::string_view key, std::size_t expected_size) {
  SCOPED_TRACE(std::string(key));
  const auto table = enum_table<E>();
  EXPECT_EQ(table.size(), expected_size);
  std::set<std::string_view> names;
  std::set<int> values;
  for (const auto& entry : table) {
    EXPECT_TRUE(names.insert(entry.name).second) << "name " << entry.name << " twice";
    EXPECT_TRUE(values.insert(static_cast<int>(entry.value)).second) << "value of " << entry.name << " twice";
    EXPECT_EQ(enum_name(entry.value), entry.name);
    EXPECT_EQ(enum_from_name<E>(entry.name), entry.value);
    EXPECT_EQ(parse_enum<E>(entry.name, key), entry.value);
    EXPECT_EQ(fmt::format("{}", entry.value), entry.name);
  }
  // The values are 0..n-1: a value missing from the table would show as a gap.
  EXPECT_EQ(*values.rbegin(), static_cast<int>(expected_size) - 1);
  EXPECT_FALSE(enum_from_name<E>("no-such-name").has_value());
  try {
    (void)parse_enum<E>("no-such-name", key);
    ADD_FAILURE() << "unknown name accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), key);
    EXPECT_NE(e.detail().find("\"no-such-name\" is not one of"), std::string::npos) << e.what();
    for (const auto& entry : table) {
      EXPECT_NE(e.detail().find("\"" + std::string(entry.name) + "\""), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigEnums, EveryNameTableRoundTrips) {
  expect_round_trip<ModelType>("model.type", 5);
  expect_round_trip<Activation>("model.activation", 2);
  expect_round_trip<PartitionMethod>("parallel.partition.method", 4);
  expect_round_trip<GradReduceDtype>("parallel.grad_reduce_dtype", 2);
  expect_round_trip<ZeroReduce>("optimizer.zero_reduce", 3);
  expect_round_trip<CommBackend>("parallel.comm_backend", 3);
  expect_round_trip<P2PProgress>("parallel.p2p_progress", 3);
  expect_round_trip<OptimizerType>("optimizer.type", 2);
  expect_round_trip<LrScheduleType>("optimizer.schedule", 3);
  expect_round_trip<Recompute>("train.recompute", 3);
  expect_round_trip<DataType>("data.type", 4);
  expect_round_trip<TokenFileFormat>("data.format", 2);
  expect_round_trip<DeviceType>("device.type", 2);
  expect_round_trip<Precision>("device.precision", 2);
  expect_round_trip<CpuBlas>("device.blas", 4);
  expect_round_trip<partition::Collective>("profile measured collective", 3);
}

// An enum with its own refusal (enum_refusal, model.router's) round-trips its names like the others and words the
// error on an unknown one itself, still naming the key and every kind.
TEST(ConfigEnums, AnEnumsOwnRefusalReplacesTheList) {
  for (const RouterKind kind : {RouterKind::kSoftmax, RouterKind::kSigmoid}) {
    EXPECT_EQ(parse_enum<RouterKind>(enum_name(kind), "model.router"), kind);
  }
  try {
    (void)parse_enum<RouterKind>("topk", "model.router");
    ADD_FAILURE() << "topk accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "model.router");
    for (const char* needle : {"\"topk\" is not a router kind", "\"softmax\"", "\"sigmoid\""}) {
      EXPECT_NE(e.detail().find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigEnums, NearMissSuggestsTheClosestName) {
  try {
    (void)parse_enum<OptimizerType>("adam", "optimizer.type");
    ADD_FAILURE() << "adam accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer.type: \"adam\" is not one of \"adamw\", \"sgd\" (did you mean \"adamw\"?)");
  }
}

// Each enum-valued key read from text, written by to_json and read back: the text a user wrote survives.
TEST(ConfigEnums, EveryValueSurvivesTheReaderAndTheWriter) {
  const auto check = [](const std::vector<std::string>& overrides, const std::string& written) {
    SCOPED_TRACE(written);
    const RunConfig c = parse_config("{}", "run.json", overrides);
    const std::string text = to_json(c);
    EXPECT_NE(text.find(written), std::string::npos) << text;
    EXPECT_EQ(parse_config(text, "config.json"), c);
  };
  for (const auto& e : enum_table<ModelType>()) {
    const std::string name(e.name);
    check({"model.type=" + name}, "\"type\": \"" + name + "\"");
  }
  for (const auto& e : enum_table<Activation>()) {
    check({"model.type=mlp", "model.activation=" + std::string(e.name)}, "\"activation\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<Recompute>()) {
    check({"train.recompute=" + std::string(e.name)}, "\"recompute\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<LrScheduleType>()) {
    check({"optimizer.schedule=" + std::string(e.name)}, "\"schedule\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<OptimizerType>()) {
    check({"optimizer.type=" + std::string(e.name)}, "\"type\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<GradReduceDtype>()) {
    check({"parallel.grad_reduce_dtype=" + std::string(e.name)}, "\"grad_reduce_dtype\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<ZeroReduce>()) {
    check({"optimizer.zero_stage=2", "optimizer.zero_reduce=" + std::string(e.name)},
          "\"zero_reduce\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<P2PProgress>()) {
    check({"parallel.p2p_progress=" + std::string(e.name)}, "\"p2p_progress\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<Precision>()) {
    check({"device.precision=" + std::string(e.name)}, "\"precision\": \"" + std::string(e.name) + "\"");
  }
  for (const auto& e : enum_table<TokenFileFormat>()) {
    check({"data.type=tokens", "data.path=t.bin", "data.format=" + std::string(e.name)},
          "\"format\": \"" + std::string(e.name) + "\"");
  }
  check({"parallel.partition.method=uniform"}, "\"method\": \"uniform\"");
  check({"parallel.comm_backend=mpi"}, "\"comm_backend\": \"mpi\"");
}

TEST(ConfigEnums, UnknownValueFromTextListsTheAllowedNames) {
  for (const auto& [override_text, needles] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"optimizer.schedule=step", {"optimizer.schedule", "\"step\"", "\"cosine\", \"constant\", \"linear\""}},
           {"data.type=images", {"data.type", "\"text\", \"tokens\", \"digits\", \"synthetic\""}},
           {"device.type=tpu", {"device.type", "\"cpu\", \"cuda\""}},
           {"parallel.grad_reduce_dtype=fp16", {"parallel.grad_reduce_dtype", "\"fp32\", \"bf16\""}}}) {
    try {
      (void)parse_config("{}", "run.json", {override_text});
      ADD_FAILURE() << override_text << " accepted";
    } catch (const Error& e) {
      for (const auto& needle : needles) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    }
  }
}

// validate() on a typed config: the planner's way of checking a candidate without going back to text.
TEST(ConfigValidate, RunsOnATypedConfigWithTheKeyAndTheSameDetail) {
  RunConfig c = parse_config("{}");
  EXPECT_NO_THROW(validate(c));
  c.model.type = ModelType::kMlp;
  c.train.recompute = Recompute::kFull;
  try {
    validate(c);
    ADD_FAILURE() << "recompute on an mlp accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "train.recompute");
    EXPECT_EQ(e.detail(), "\"full\" recomputes transformer blocks, and model.type mlp has none; use \"none\"");
    // parse_config reports the same detail under the key's origin.
    try {
      (void)parse_config("{}", "run.json", {"model.type=mlp", "train.recompute=full"});
      ADD_FAILURE() << "parse_config accepted recompute on an mlp";
    } catch (const Error& parsed) {
      EXPECT_NE(std::string(parsed.what()).find("train.recompute: " + e.detail()), std::string::npos) << parsed.what();
    }
  }
  c.train.recompute = Recompute::kNone;
  EXPECT_NO_THROW(validate(c));
  c.parallel.tensor_model_parallel_size = 2;  // the model's own rules run too: tp needs a gpt
  try {
    validate(c);
    ADD_FAILURE() << "tp 2 on an mlp accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "parallel.tensor_model_parallel_size");
  }
}

}  // namespace
}  // namespace cleave::config::enums_test
