// Config: defaults, every strictness error (message names the key path and the numbers), --set overrides,
// batch resolution and the to_json -> parse round trip.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cleave/config.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "partition/tp_rules.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::config::config_test {
namespace {

// Parses `text` with `overrides`, expects cleave::InputError (bad input: `cleave` exits ExitCode::kBadInput and
// `cleave run` does not restart it; a plain Error fails the test), and checks that the message contains each needle.
void expect_error(const std::string& text, const std::vector<std::string>& needles,
                  const std::vector<std::string>& overrides = {}) {
  try {
    (void)parse_config(text, "run.json", overrides);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
    for (const auto& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "message lacks '" << needle << "': " << message;
    }
  }
}

TEST(Config, EmptyConfigIsTheSyntheticTinyGpt) {
  const RunConfig c = parse_config("{}");
  EXPECT_EQ(c.model.type, ModelType::kGpt);
  EXPECT_EQ(c.data.type, DataType::kSynthetic);
  EXPECT_EQ(c.model.gpt.d_ff, 4 * c.model.gpt.d_model);
  EXPECT_EQ(c.parallel.data_parallel_size, -1);
  EXPECT_FALSE(c.batch.global_batch_size.has_value());
  EXPECT_EQ(load_config(""), c);
  EXPECT_EQ(parse_config(""), c);
}

TEST(Config, ReadsEverySection) {
  const RunConfig c = parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 300, "d_model": 96, "n_layers": 3, "n_heads": 6, "seq_len": 17,
              "tie_embeddings": false},
    "parallel": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 3, "data_parallel_size": 2,
                 "virtual_pipeline_stages": 2, "schedule": "interleaved_1f1b",
                 "partition": {"method": "manual", "blocks_per_stage": [2, 1, 1, 1, 1, 1]}, "dp_bucket_mb": 4.5},
    "batch": {"global_batch_size": 48, "micro_batch_size": 4},
    "optimizer": {"type": "sgd", "lr": 0.05, "weight_decay": 0.001, "betas": [0.8, 0.95], "eps": 1e-6,
                  "momentum": 0.85, "nesterov": true, "grad_clip": 0.5, "warmup_steps": 7, "schedule": "linear",
                  "min_lr": 0.001, "zero_stage": 1},
    "train": {"steps": 11, "seed": 18446744073709551615, "log_interval": 3, "deterministic": true,
              "out_dir": "runs/x", "comm_timeout_s": 12.5, "trace": true, "eval_interval": 5, "eval_batches": 2,
              "report": false},
    "checkpoint": {"dir": "ck", "interval": 4, "keep_last": 2, "save_final": false},
    "data": {"type": "tokens", "path": "a.bin", "val_path": "b.bin", "val_fraction": 0.25, "format": "uint16"},
    "device": {"type": "cuda", "memory_limit": "1.5GiB", "precision": "bf16"}
  })");
  EXPECT_EQ(c.model.gpt.vocab_size, 300);
  EXPECT_EQ(c.model.gpt.d_ff, 384);
  EXPECT_FALSE(c.model.gpt.tie_embeddings);
  EXPECT_EQ(c.parallel.pipeline_model_parallel_size, 3);
  EXPECT_EQ(c.parallel.partition.blocks_per_stage, (std::vector<std::int64_t>{2, 1, 1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(c.parallel.dp_bucket_mb, 4.5);
  EXPECT_EQ(*c.batch.global_batch_size, 48);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kSgd);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_EQ(c.optimizer.zero_stage, 1);
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  EXPECT_EQ(c.train.out_dir, "runs/x");
  EXPECT_FALSE(c.train.report);
  EXPECT_EQ(c.checkpoint.dir, "ck");
  EXPECT_EQ(c.checkpoint.interval, 4);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_FALSE(c.checkpoint.save_final);
  EXPECT_EQ(c.data.format, TokenFileFormat::kUint16);
  EXPECT_EQ(c.device.memory_limit, 1610612736);
  EXPECT_EQ(c.device.precision, Precision::kBf16);
}

TEST(Config, MlpAndCnnModels) {
  const RunConfig m = parse_config(
      R"({"model": {"type": "mlp", "in_features": 64, "hidden": [33, 17], "num_classes": 10, "activation": "gelu"},
          "data": {"type": "digits"}})");
  EXPECT_EQ(m.model.mlp.hidden, (std::vector<std::int64_t>{33, 17}));
  EXPECT_EQ(m.data.path, "data/digits.csv.gz");
  EXPECT_DOUBLE_EQ(m.data.val_fraction, 0.2);
  const RunConfig c = parse_config(
      R"({"model": {"type": "cnn", "in_channels": 3, "height": 12, "width": 9, "channels": [5], "kernel": 5,
                    "pool": 3, "num_classes": 4}})");
  EXPECT_EQ(c.model.cnn.width, 9);
  EXPECT_EQ(c.model.cnn.kernel, 5);
}

TEST(Config, MalformedJsonNamesLineAndColumn) {
  expect_error("{\n  \"train\": {\"steps\": 10,\n  }\n}", {"run.json", "malformed JSON", "line 3, column 3"});
  expect_error("{\"train\": ", {"run.json", "malformed JSON", "line 1"});
  expect_error("[1, 2]", {"run.json", "expected a JSON object", "[1,2]"});
}

// A number beyond a double is bad input with a one-line cleave::Error naming the file (or the --set) and the
// text; the JSON library's own exception used to escape (printed as "[json.exception.out_of_range.406] ...").
TEST(Config, NumbersBeyondADoubleAreRefusedByName) {
  expect_error(R"({"train": {"steps": 1e400}})", {"run.json", "number overflow parsing '1e400'", "fit a double"});
  expect_error("{}", {"optimizer.lr", "expected a number", "1e309"}, {"optimizer.lr=1e309"});
}

// fuzz: tests/fuzz/corpus/config/regress-set-invalid-utf8 (to_json threw the JSON library's type_error 316).
TEST(Config, SetValuesMustBeUtf8) {
  expect_error("{}", {"--set data.path=", "not valid UTF-8 (byte 0xED at offset 10)"}, {"data.path=\xed"});
  expect_error("{}", {"not valid UTF-8 (byte 0xC0 at offset 5)"}, {"data.\xc0\x80=1"});  // overlong form
  expect_error("{}", {"byte 0xED"}, {"train.out_dir=\xed\xa0\x80"});                     // a surrogate
  const RunConfig c = parse_config("{}", "run.json", {"train.out_dir=r\xc3\xa9sum\xc3\xa9"});  // "résumé"
  EXPECT_EQ(c.train.out_dir, "r\xc3\xa9sum\xc3\xa9");
  EXPECT_EQ(parse_config(to_json(c), "again"), c);
}

// Sizes are bounded before anything is built from them: no list of a billion blocks, no int64 overflow in
// 4 × d_model, tp × pp or micro × accumulation × dp, no negative memory cap from a size past int64.
TEST(Config, SizesHaveLimits) {
  expect_error("{}", {"--set model.n_layers=1000000000", "model.n_layers: 1000000000 is above the limit 65536"},
               {"model.n_layers=1000000000"});
  expect_error("{}", {"model.d_model: 4611686018427387904 is above the limit 16777216"},
               {"model.d_model=4611686018427387904"});
  expect_error(R"({"model": {"type": "mlp", "hidden": [8, 99999999999]}})",
               {"model.hidden[1]: 99999999999 is above the limit 16777216"});
  expect_error("{}", {"parallel.tensor_model_parallel_size: 2147483647 is above the limit 65536"},
               {"parallel.tensor_model_parallel_size=2147483647"});
  expect_error("{}", {"device.memory_limit", "'1e300TiB' is too large"}, {"device.memory_limit=\"1e300TiB\""});
  expect_error("{}", {"device.memory_limit", "'inf' is too large"}, {"device.memory_limit=\"inf\""});
  // At the limits every product still fits: 2^24 × 2^24 × 2^16 samples is refused by name, not overflowed.
  BatchConfig batch;
  batch.micro_batch_size = std::int64_t{1} << 24;
  batch.gradient_accumulation_steps = std::int64_t{1} << 24;
  try {
    (void)resolve_batch(batch, 1 << 16);
    ADD_FAILURE() << "accepted 2^64 samples per step";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is beyond 2^62 samples per step"), std::string::npos) << e.what();
  }
  RunConfig c = parse_config("{}", "run.json", {"model.n_heads=65536", "model.d_model=65536",
                                                "parallel.tensor_model_parallel_size=65536",
                                                "parallel.pipeline_model_parallel_size=65536"});
  try {
    c.resolve(8);
    ADD_FAILURE() << "resolved tp 65536 x pp 65536 on 8 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tp(65536) × pp(65536) = 4294967296"), std::string::npos) << e.what();
  }
}

// fuzz: a JSON key holding "\n" made a two-line message; quoted input is escaped (engine/core/one_line.hpp).
TEST(Config, MessagesQuotingInputStayOneLine) {
  expect_error(R"({"a\nb": 1})", {"unknown key a\\nb"});
  expect_error(R"({"train": {"out\u0001dir": 1}})", {"unknown key train.out\\x01dir"});
  expect_error("{}", {"--set data.typ\\te"}, {"data.typ\te=text"});
}

TEST(Config, DuplicateKeysNameThePath) {
  expect_error(R"({"optimizer": {"lr": 0.1, "type": "sgd", "lr": 0.2}})", {"run.json", "duplicate key optimizer.lr"});
  expect_error(R"({"train": {}, "train": {}})", {"duplicate key train"});
  expect_error(R"({"model": {"type": "mlp", "hidden": [1, 2]}, "x": [{"a": 1}, {"b": 1, "b": 2}]})",
               {"duplicate key x[1].b"});
}

TEST(Config, UnknownKeysSuggestTheClosest) {
  expect_error(R"({"optimizer": {"lrr": 0.1}})", {"run.json", "unknown key optimizer.lrr", "did you mean optimizer.lr?"});
  expect_error(R"({"train": {"lr": 0.1}})", {"unknown key train.lr", "did you mean optimizer.lr?"});
  expect_error(R"({"optimiser": {}})", {"unknown key optimiser", "did you mean optimizer?"});
  expect_error(R"({"model": {"hidden": [4]}})", {"unknown key model.hidden", "mlp", "model.type is \"gpt\""});
  // The file's keys are another family's because --set changed model.type: the note names that --set.
  expect_error(R"({"model": {"type": "moe", "n_experts": 4}})",
               {"config run.json: unknown key model.n_experts (a key of moe models, but model.type is \"llama\" "
                "(--set model.type=llama))"},
               {"model.type=llama"});
  expect_error(R"({"data": {"zzzzzz": 1}})", {"unknown key data.zzzzzz", "known keys in data", "val_fraction"});
  // All unknown keys in one message.
  expect_error(R"({"train": {"stepz": 1}, "device": {"typo": 1}})", {"train.stepz", "device.typo"});
}

// Megatron-LM / torchtitan / Hugging Face names lead to Cleave's key (peer_key_names.hpp), for the model type at hand;
// by spelling alone expert_parallel_size led to context_parallel_size and ep to optimizer.eps.
TEST(Config, OtherTrainersKeyNamesSuggestCleavesKey) {
  const std::string peer = " is the Megatron-LM / torchtitan / Hugging Face name)";
  expect_error(R"({"model": {"type": "moe"}, "parallel": {"expert_parallel_size": 2}})",
               {"unknown key parallel.expert_parallel_size (did you mean parallel.expert_model_parallel_size? "
                "expert_parallel_size" + peer});
  expect_error(R"({"parallel": {"ep": 2}})", {"did you mean parallel.expert_model_parallel_size?"});
  expect_error(R"({"parallel": {"tensor_parallel_degree": 2}})", {"did you mean parallel.tensor_model_parallel_size?"});
  expect_error(R"({"model": {"hidden_size": 64}})", {"did you mean model.d_model? hidden_size" + peer});
  expect_error(R"({"model": {"intermediate_size": 64}})", {"did you mean model.d_ff?"});  // gpt's name
  expect_error(R"({"model": {"type": "llama", "intermediate_size": 64}})", {"did you mean model.ffn_hidden_size?"});
  expect_error(R"({"model": {"type": "moe", "num_experts_per_tok": 2}})", {"did you mean model.top_k?"});
  expect_error(R"({"data": {"seq_length": 64}})", {"did you mean model.seq_len?"});
  expect_error(R"({"optimizer": {"learning_rate": 0.1}})", {"did you mean optimizer.lr?"});
}

TEST(Config, WrongTypesNameKeyAndValue) {
  expect_error(R"({"optimizer": {"lr": "abc"}})", {"optimizer.lr: expected a number, got \"abc\""});
  expect_error(R"({"train": {"steps": 2.5}})", {"train.steps: expected an integer, got 2.5"});
  expect_error(R"({"train": {"deterministic": 1}})", {"train.deterministic: expected true or false, got 1"});
  expect_error(R"({"train": {"out_dir": 7}})", {"train.out_dir: expected a string, got 7"});
  expect_error(R"({"model": {"type": "mlp", "hidden": [8, "x"]}})", {"model.hidden[1]: expected an integer"});
  expect_error(R"({"optimizer": {"betas": [0.9]}})", {"optimizer.betas: expected an array of 2 numbers"});
  expect_error(R"({"parallel": 3})", {"parallel: expected an object, got 3"});
  expect_error(R"({"model": {"type": "rnn"}})", {"model.type", "\"rnn\" is not one of", "\"gpt\""});
  expect_error(R"({"optimizer": {"type": "adam"}})", {"optimizer.type", "did you mean \"adamw\"?"});
  expect_error(R"({"device": {"memory_limit": "12 parsecs"}})", {"device.memory_limit", "parsecs"});
  expect_error(R"({"device": {"memory_limit": true}})", {"device.memory_limit", "expected a size"});
  // 10.0 is an integer written as a float: accepted.
  EXPECT_EQ(parse_config(R"({"train": {"steps": 10.0}})").train.steps, 10);
}

TEST(Config, NonPositiveSizesNameKeyAndValue) {
  expect_error(R"({"model": {"d_model": 0}})", {"model.d_model: must be positive, got 0"});
  expect_error(R"({"model": {"n_layers": -3}})", {"model.n_layers: must be positive, got -3"});
  expect_error(R"({"model": {"type": "mlp", "hidden": [8, 0]}})", {"model.hidden[1]: must be positive, got 0"});
  expect_error(R"({"batch": {"micro_batch_size": 0}})", {"batch.micro_batch_size: must be positive, got 0"});
  expect_error(R"({"parallel": {"pipeline_model_parallel_size": -2}})",
               {"parallel.pipeline_model_parallel_size: must be positive, got -2"});
  expect_error(R"({"parallel": {"data_parallel_size": 0}})", {"parallel.data_parallel_size", "got 0"});
  expect_error(R"({"train": {"seed": -1}})", {"train.seed", "-1"});
  expect_error(R"({"optimizer": {"lr": -0.5}})", {"optimizer.lr", "-0.5"});
  expect_error(R"({"optimizer": {"betas": [0.9, 1.0]}})", {"optimizer.betas[1]", "1 is outside [0, 1)"});
  expect_error(R"({"optimizer": {"eps": 0}})", {"optimizer.eps", "0 is outside (0"});
  expect_error(R"({"data": {"val_fraction": 1.0}})", {"data.val_fraction", "outside [0, 1)"});
  expect_error(R"({"optimizer": {"zero_stage": 4}})", {"optimizer.zero_stage", "or 3 (and parameters), got 4"});
}

// optimizer.zero_reduce: auto resolves per micro-batch for ZeRO-2/3 at dp > 1, per step where that form cannot
// keep its promise (deterministic mode, sequence parallelism), nothing below stage 2 or without dp; an explicit
// per_microbatch that contradicts those keys is refused naming both.
TEST(Config, ZeroReduceResolvesAndRefusesWhatItCannotKeep) {
  const auto resolved = [](const std::vector<std::string>& overrides) {
    RunConfig c = parse_config("{}", "run.json", overrides);
    c.resolve(4);
    return resolved_zero_reduce(c);
  };
  const std::string dp4 = "parallel.data_parallel_size=4";
  EXPECT_EQ(resolved({dp4, "optimizer.zero_stage=2"}), ZeroReduce::kPerMicrobatch);
  EXPECT_EQ(resolved({dp4, "optimizer.zero_stage=3"}), ZeroReduce::kPerMicrobatch);
  EXPECT_EQ(resolved({dp4, "optimizer.zero_stage=3", "optimizer.zero_reduce=per_step"}), ZeroReduce::kPerStep);
  EXPECT_EQ(resolved({dp4, "optimizer.zero_stage=2", "train.deterministic=true"}), ZeroReduce::kPerStep);
  EXPECT_EQ(resolved({"parallel.data_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                      "parallel.sequence_parallel=true", "optimizer.zero_stage=3"}),
            ZeroReduce::kPerStep);
  EXPECT_EQ(resolved({dp4, "optimizer.zero_stage=1", "optimizer.zero_reduce=per_microbatch"}), ZeroReduce::kAuto);
  EXPECT_EQ(resolved({"parallel.data_parallel_size=1", "parallel.pipeline_model_parallel_size=4",
                      "optimizer.zero_stage=2"}), ZeroReduce::kAuto);
  EXPECT_EQ(RunConfig().optimizer.zero_reduce, ZeroReduce::kAuto);
  expect_error(R"({"optimizer": {"zero_stage": 2, "zero_reduce": "per_microbatch"}, "train": {"deterministic": true}})",
               {"optimizer.zero_reduce", "train.deterministic", "per_step"});
  expect_error(R"({"optimizer": {"zero_stage": 3, "zero_reduce": "per_microbatch"},
                  "parallel": {"tensor_model_parallel_size": 2, "sequence_parallel": true}})",
               {"optimizer.zero_reduce", "sequence_parallel", "tp 2"});
  expect_error(R"({"optimizer": {"zero_reduce": "per_batch"}})",
               {"optimizer.zero_reduce", "\"auto\", \"per_microbatch\", \"per_step\""});
}

TEST(Config, CrossKeyChecksNameBothKeys) {
  expect_error(R"({"model": {"d_model": 100, "n_heads": 3}})", {"model.d_model", "100", "model.n_heads 3"});
  expect_error(R"({"model": {"n_heads": 4}, "parallel": {"tensor_model_parallel_size": 3}})",
               {"model.n_heads", "4", "tensor_model_parallel_size 3"});
  expect_error(R"({"model": {"type": "cnn", "kernel": 4}})", {"model.kernel", "odd", "4"});
  expect_error(R"({"model": {"type": "cnn", "channels": [4, 4, 4, 4]}})", {"model.channels", "8×8", "stage 4"});
  expect_error(R"({"optimizer": {"lr": 0.001, "min_lr": 0.01}})", {"optimizer.min_lr", "0.01", "0.001"});
  expect_error(R"({"optimizer": {"type": "sgd", "momentum": 0, "nesterov": true}})", {"optimizer.nesterov"});
  // Accepted it would do nothing: AdamW has no Nesterov momentum.
  expect_error(R"({"optimizer": {"type": "adamw", "nesterov": true}})",
               {"config run.json: optimizer.nesterov: is SGD's Nesterov momentum, and optimizer.type is \"adamw\""});
  // Accepted, they would do nothing: a token layout without token files, a cp exchange without cp.
  expect_error(R"({"data": {"format": "uint16"}})",
               {"data.format: \"uint16\" is the layout of a token file, and data.type is \"synthetic\""});
  expect_error(R"({"parallel": {"context_parallel_comm": "all_to_all"}})",
               {"parallel.context_parallel_comm: \"all_to_all\"", "context_parallel_size is 1"});
  EXPECT_NO_THROW(parse_config(R"({"data": {"format": "llmc"}, "parallel": {"context_parallel_comm": "ring"}})"));
  EXPECT_NO_THROW(parse_config(R"({"optimizer": {"type": "adamw", "nesterov": false}})"));
  expect_error(R"({"parallel": {"pipeline_model_parallel_size": 2, "partition": {"method": "manual",
                  "blocks_per_stage": [1, 2, 3]}}})",
               {"blocks_per_stage", "has 3 entries", "pipeline_model_parallel_size 2", "= 2"});
  expect_error(R"({"parallel": {"partition": {"blocks_per_stage": [3]}}})", {"blocks_per_stage", "manual"});
  expect_error(R"({"parallel": {"partition": {"method": "manual"}}})", {"blocks_per_stage", "required"});
  expect_error(R"({"parallel": {"schedule": "1fb1"}})", {"parallel.schedule", "\"1fb1\"", "did you mean \"1f1b\"?"});
  // Virtual stages a one-chunk schedule cannot run: at 2 every two-chunk schedule is named, at 3 the one that runs 3
  // (benchmarks/verify/layout_sweep.py found 2 answered with interleaved_1f1b alone).
  expect_error(R"({"parallel": {"schedule": "zb_h1", "virtual_pipeline_stages": 2}})",
               {"parallel.virtual_pipeline_stages", "schedule zb_h1 runs one stage per rank",
                "runs 2 stages per rank (interleaved_1f1b, zb_v or dualpipev)"});
  expect_error(R"({"parallel": {"schedule": "gpipe", "virtual_pipeline_stages": 3}})",
               {"parallel.virtual_pipeline_stages", "runs 3 stages per rank (interleaved_1f1b)"});
  expect_error(R"({"data": {"type": "text"}})", {"data.path", "required", "text"});
  expect_error(R"({"data": {"type": "text", "path": "x.txt"}, "model": {"vocab_size": 100}})",
               {"model.vocab_size", "100", "256"});
  expect_error(R"({"data": {"type": "digits"}})", {"data.type", "digits", "mlp"});
  expect_error(R"({"data": {"type": "digits"}, "model": {"type": "mlp", "in_features": 32}})",
               {"model.in_features", "32", "64"});
  expect_error(R"({"data": {"type": "digits"}, "model": {"type": "cnn", "height": 9}})", {"height 9", "1 × 8 × 8"});
  expect_error(R"({"data": {"type": "tokens", "path": "t.bin", "val_fraction": 0}})",
               {"train.eval_batches", "8", "val_fraction"});
  expect_error(R"({"train": {"out_dir": ""}})", {"train.out_dir", "empty"});
  // Synthetic data reads no file: a path beside it (data.type forgotten: its default is synthetic) is refused,
  // naming both keys and both fixes; cleared with --set data.path= it trains on synthetic data.
  expect_error(R"({"data": {"path": "corpus.txt"}})",
               {"data.path: \"corpus.txt\" is set, but data.type is \"synthetic\"", "set data.type to \"text\" or "
                "\"tokens\"", "--set data.path="});
  expect_error(R"({"data": {"type": "text", "path": "corpus.txt", "val_path": "v.txt"}})", {"data.val_path", "synthetic"},
               {"data.type=synthetic", "data.path="});
  EXPECT_NO_THROW(parse_config(R"({"data": {"type": "text", "path": "corpus.txt"}})", "run.json",
                               {"data.type=synthetic", "data.path="}));
}

// A two-chunk schedule at the default virtual_pipeline_stages 1 runs 2 stages per rank, so a manual partition gives
// pp × 2 entries: the config reader counts the stages the partitioner will cut (before, it asked for pp entries and the
// partitioner then refused them: no blocks_per_stage passed both).
TEST(Config, ManualPartitionCountsTheSchedulesDefaultStages) {
  for (const char* schedule : {"zb_v", "dualpipev", "interleaved_1f1b"}) {
    SCOPED_TRACE(schedule);
    const std::string head = std::string(R"({"parallel": {"pipeline_model_parallel_size": 2, "schedule": ")") +
                             schedule + R"(", "partition": {"method": "manual", "blocks_per_stage": )";
    EXPECT_NO_THROW(parse_config(head + "[1, 2, 2, 1]}}}"));
    expect_error(head + "[3, 3]}}}", {"blocks_per_stage", "has 2 entries", "pipeline_model_parallel_size 2 × 2 stages "
                                      "per rank (parallel.schedule \"" + std::string(schedule) + "\") = 4"});
  }
  // The entries cover the model's blocks (the default gpt's 2 layers: 6), checked before any work.
  expect_error(R"({"parallel": {"pipeline_model_parallel_size": 2, "schedule": "zb_v", "partition": {"method": "manual",
                  "blocks_per_stage": [1, 2, 2, 2]}}})",
               {"blocks_per_stage", "[1,2,2,2] covers 7 blocks", "model.type gpt has 6: its embedding, the "
                "model.n_layers transformer blocks, final norm, head and loss (sum 7 != 6)"});
  // A classifier's blocks in its own family's words (the default mlp's 6).
  expect_error(R"({"model": {"type": "mlp"}, "parallel": {"pipeline_model_parallel_size": 2, "partition":
                  {"method": "manual", "blocks_per_stage": [1, 2]}}})",
               {"[1,2] covers 3 blocks, and model.type mlp has 6: a linear and an activation per model.hidden entry, "
                "the linear to the classes and the loss (sum 3 != 6)"});
  // An explicit count is the count; one-chunk schedules keep pp entries.
  EXPECT_NO_THROW(parse_config(R"({"parallel": {"pipeline_model_parallel_size": 2, "schedule": "interleaved_1f1b",
      "virtual_pipeline_stages": 3, "partition": {"method": "manual", "blocks_per_stage": [1, 1, 1, 1, 1, 1]}}})"));
  EXPECT_NO_THROW(parse_config(R"({"parallel": {"pipeline_model_parallel_size": 2, "schedule": "zb_h1",
      "partition": {"method": "manual", "blocks_per_stage": [3, 3]}}})"));
}

TEST(Config, SetOverrides) {
  const RunConfig c = parse_config(R"({"optimizer": {"lr": 0.1}})", "run.json",
                                   {"optimizer.lr=3e-4", "parallel.pipeline_model_parallel_size=4",
                                    "train.out_dir=runs/exp 1", "optimizer.betas=[0.5,0.6]", "data.path=123",
                                    "data.type=digits", "model.type=mlp", "device.memory_limit=512MiB", "train.deterministic=true"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.parallel.pipeline_model_parallel_size, 4);
  EXPECT_EQ(c.train.out_dir, "runs/exp 1");
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.5);
  EXPECT_EQ(c.data.path, "123");  // a string key keeps the typed text even when it parses as a number
  EXPECT_EQ(c.model.type, ModelType::kMlp);
  EXPECT_EQ(c.device.memory_limit, 512 << 20);
  EXPECT_TRUE(c.train.deterministic);
  // Creates sections that the file does not have.
  EXPECT_EQ(parse_config("{}", "x", {"batch.global_batch_size=32"}).batch.global_batch_size, 32);
}

TEST(Config, SetErrorsNameTheAssignment) {
  expect_error("{}", {"--set optimizer.lrr=0.1", "unknown key optimizer.lrr", "did you mean optimizer.lr?"},
               {"optimizer.lrr=0.1"});
  expect_error("{}", {"--set optimizer.lr=abc", "optimizer.lr: expected a number, got \"abc\""}, {"optimizer.lr=abc"});
  expect_error("{}", {"--set lr", "expected key.path=value"}, {"lr"});
  expect_error("{}", {"--set optimizer..lr=1", "empty component"}, {"optimizer..lr=1"});
  expect_error("{}", {"--set optimizer.lr.x=1", "optimizer.lr is not a section"}, {"optimizer.lr=0.1", "optimizer.lr.x=1"});
  expect_error("{}", {"--set foo.bar=1", "unknown key foo"}, {"foo.bar=1"});
  // An array element's error names the --set that gave the array, not the file (which never had it).
  expect_error(R"({"model": {"type": "mlp", "hidden": [8]}})",
               {"--set model.hidden=[4,0]: model.hidden[1]: must be positive, got 0"}, {"model.hidden=[4,0]"});
  expect_error("{}", {"--set model.hidden=[4,\"x\"]: model.hidden[1]: expected an integer"},
               {"model.type=mlp", "model.hidden=[4,\"x\"]"});
  expect_error(R"({"model": {"type": "mlp", "hidden": [4, 0]}})", {"config run.json: model.hidden[1]"},
               {"optimizer.lr=0.1"});
  expect_error(R"({"model": {"vocab_size": 64}})", {"unknown key model.vocab_size", "gpt"}, {"model.type=mlp"});
}

TEST(Config, LoadConfigFileErrors) {
  const auto dir = std::filesystem::temp_directory_path() / "cleave_config_test";
  std::filesystem::create_directories(dir);
  const auto missing = (dir / "missing.json").string();
  EXPECT_THROW((void)load_config(missing), Error);
  try {
    (void)load_config(missing);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
  }
  const auto empty = (dir / "empty.json").string();
  std::ofstream(empty) << "  \n";
  try {
    (void)load_config(empty);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  }
  const auto good = (dir / "good.json").string();
  std::ofstream(good) << R"({"train": {"steps": 42}})";
  EXPECT_EQ(load_config(good, {"train.seed=9"}).train.steps, 42);
  EXPECT_EQ(load_config(good, {"train.seed=9"}).train.seed, 9u);
  const auto bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\"train\": {\"steps\": 42,}}";
  try {
    (void)load_config(bad);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1, column"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A schedule file is parsed with the config: a well-formed one is accepted, a malformed one is refused naming the key,
// the file and its line (it exited 1 once the world was up).
TEST(Config, ScheduleFilePathIsAccepted) {
  const auto file = std::filesystem::temp_directory_path() / "cleave_config_schedule.txt";
  std::ofstream(file) << "rank 0: 0F0 0B0\n";
  EXPECT_EQ(parse_config("{}", "x", {"parallel.schedule=" + file.string()}).parallel.schedule, file.string());
  std::ofstream(file) << "0F0 0B0\n";
  try {
    parse_config("{}", "x", {"parallel.schedule=" + file.string()});
    ADD_FAILURE() << "a malformed schedule file accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.schedule: schedule file '" + file.string() + "' line 1"),
              std::string::npos) << e.what();
  }
  std::filesystem::remove(file);
}

// The model's rules have one home (partition's spec builders and tensor-parallel rules); config runs them and
// reports their message under the key's origin, word for word.
TEST(Config, ModelRulesAreThePartitionsOwn) {
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto config_message = [&](const std::string& text, const std::vector<std::string>& overrides = {}) {
    return message([&] { (void)parse_config(text, "run.json", overrides); });
  };
  partition::GptConfig gpt;
  gpt.d_model = 100;
  gpt.n_heads = 3;
  EXPECT_EQ(config_message(R"({"model": {"d_model": 100, "n_heads": 3}})"),
            "config run.json: " + message([&] { partition::make_gpt_spec(gpt); }));
  EXPECT_EQ(config_message("{}", {"model.d_model=100", "model.n_heads=3"}),
            "--set model.d_model=100: " + message([&] { partition::make_gpt_spec(gpt); }));
  partition::CnnConfig cnn;
  cnn.channels = {4, 4, 4, 4};
  EXPECT_EQ(config_message(R"({"model": {"type": "cnn", "channels": [4, 4, 4, 4]}})"),
            "config run.json: " + message([&] { partition::make_cnn_spec(cnn); }));
  // Tensor-parallel rules: the ones config used to lack are there too (tp larger than the head count, tp on a
  // model that cannot be split).
  partition::GptConfig heads4;
  heads4.n_heads = 4;
  heads4.d_ff = 256;
  EXPECT_EQ(config_message(R"({"model": {"n_heads": 4}, "parallel": {"tensor_model_parallel_size": 8}})"),
            "config run.json: " +
                message([&] { partition::check_tensor_parallel(partition::make_gpt_spec(heads4), 8); }));
  expect_error(R"({"model": {"n_heads": 4}, "parallel": {"tensor_model_parallel_size": 8}})",
               {"parallel.tensor_model_parallel_size: 8 is larger than model.n_heads 4", "use tp in {1, 2, 4}"});
  expect_error(R"({"model": {"type": "mlp"}, "parallel": {"tensor_model_parallel_size": 2}})",
               {"parallel.tensor_model_parallel_size: 2", "model.type gpt, llama and moe only", "mlp"});
}

// parallel.schedule accepts exactly the schedule registry's names (pipeline/schedules/registry.cpp), and its
// error lists them in the registry's order: config keeps no list of its own.
TEST(Config, ScheduleNamesComeFromTheRegistry) {
  const std::vector<std::string_view> names = pipeline::schedule_names();
  ASSERT_GE(names.size(), 5u);
  for (std::string_view name : names) {
    EXPECT_EQ(parse_config("{}", "x", {"parallel.schedule=" + std::string(name)}).parallel.schedule, name);
  }
  expect_error(R"({"parallel": {"schedule": "2f2b"}})",
               {"parallel.schedule", "\"2f2b\" is neither a schedule", fmt::format("({})", fmt::join(names, ", "))});
}

// parallel.auto_schedule_memory_limit: stashes per pp rank for schedule "auto" (0 = pp size); an error for any
// other schedule or a negative value, and written back into the resolved config.
TEST(Config, AutoScheduleMemoryLimit) {
  const RunConfig c = parse_config(R"({"parallel": {"schedule": "auto", "auto_schedule_memory_limit": 7}})", "x");
  EXPECT_EQ(c.parallel.auto_schedule_memory_limit, 7);
  EXPECT_EQ(parse_config("{}", "x").parallel.auto_schedule_memory_limit, 0);
  EXPECT_NE(to_json(c).find("\"auto_schedule_memory_limit\": 7"), std::string::npos) << to_json(c);
  expect_error(R"({"parallel": {"auto_schedule_memory_limit": 4}})",
               {"parallel.auto_schedule_memory_limit", "applies only to parallel.schedule \"auto\"", "\"1f1b\""});
  expect_error(R"({"parallel": {"schedule": "auto", "auto_schedule_memory_limit": -2}})",
               {"parallel.auto_schedule_memory_limit", "-2"});
}

// parallel.auto_schedule_weight_stash_fraction (the zero-bubble paper's M_W / M_B, in (0, 1], default 1) and
// parallel.auto_schedule_objective (makespan, the default, or span): read, written back, refused out of range or
// with another schedule, naming the key and the value.
TEST(Config, AutoScheduleWeightStashFractionAndObjective) {
  const RunConfig c = parse_config(
      R"({"parallel": {"schedule": "auto", "auto_schedule_weight_stash_fraction": 0.25,
                       "auto_schedule_objective": "span"}})",
      "x");
  EXPECT_EQ(c.parallel.auto_schedule_weight_stash_fraction, 0.25);
  EXPECT_EQ(c.parallel.auto_schedule_objective, AutoScheduleObjectiveChoice::kSpan);
  const RunConfig d = parse_config("{}", "x");
  EXPECT_EQ(d.parallel.auto_schedule_weight_stash_fraction, 1.0);
  EXPECT_EQ(d.parallel.auto_schedule_objective, AutoScheduleObjectiveChoice::kMakespan);
  EXPECT_NE(to_json(c).find("\"auto_schedule_weight_stash_fraction\": 0.25"), std::string::npos) << to_json(c);
  EXPECT_NE(to_json(c).find("\"auto_schedule_objective\": \"span\""), std::string::npos) << to_json(c);
  EXPECT_EQ(parse_config(to_json(c), "x").parallel.auto_schedule_objective, AutoScheduleObjectiveChoice::kSpan);
  expect_error(R"({"parallel": {"auto_schedule_weight_stash_fraction": 0.5}})",
               {"parallel.auto_schedule_weight_stash_fraction", "applies only to parallel.schedule \"auto\"",
                "\"1f1b\""});
  expect_error(R"({"parallel": {"schedule": "zb_h1", "auto_schedule_objective": "span"}})",
               {"parallel.auto_schedule_objective", "applies only to parallel.schedule \"auto\"", "\"zb_h1\""});
  expect_error(R"({"parallel": {"schedule": "auto", "auto_schedule_weight_stash_fraction": 0}})",
               {"parallel.auto_schedule_weight_stash_fraction", "0"});
  expect_error(R"({"parallel": {"schedule": "auto", "auto_schedule_weight_stash_fraction": 1.5}})",
               {"parallel.auto_schedule_weight_stash_fraction", "1.5"});
  expect_error(R"({"parallel": {"schedule": "auto", "auto_schedule_objective": "bubble"}})",
               {"parallel.auto_schedule_objective", "bubble", "makespan", "span"});
}

TEST(Config, ResolveBatch) {
  auto batch = [](std::optional<std::int64_t> g, std::optional<std::int64_t> m, std::optional<std::int64_t> a) {
    return BatchConfig{g, m, a};
  };
  auto same = [](const ResolvedBatch& r, std::int64_t g, std::int64_t m, std::int64_t a) {
    EXPECT_EQ(r.global_batch_size, g);
    EXPECT_EQ(r.micro_batch_size, m);
    EXPECT_EQ(r.gradient_accumulation_steps, a);
  };
  same(resolve_batch(batch(96, 4, std::nullopt), 3), 96, 4, 8);
  same(resolve_batch(batch(96, std::nullopt, 4), 3), 96, 8, 4);
  same(resolve_batch(batch(std::nullopt, 5, 3), 2), 30, 5, 3);
  same(resolve_batch(batch(96, 4, 8), 3), 96, 4, 8);
  same(resolve_batch(batch(12, std::nullopt, std::nullopt), 3), 12, 4, 1);
  same(resolve_batch(batch(std::nullopt, std::nullopt, std::nullopt), 2), 16, 8, 1);
  same(resolve_batch(batch(std::nullopt, 3, std::nullopt), 1), 3, 3, 1);
  same(resolve_batch(batch(std::nullopt, std::nullopt, 5), 1), 40, 8, 5);

  auto expect_batch_error = [](const BatchConfig& b, int dp, const std::vector<std::string>& needles) {
    try {
      (void)resolve_batch(b, dp);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  expect_batch_error(batch(64, 8, 2), 2,
                     {"global_batch_size 64", "micro_batch_size 8", "gradient_accumulation_steps 2", "size 2", "= 32"});
  expect_batch_error(batch(60, 8, std::nullopt), 2, {"global_batch_size 60", "micro_batch_size 8", "size 2", "16"});
  expect_batch_error(batch(60, std::nullopt, 7), 1, {"global_batch_size 60", "gradient_accumulation_steps 7"});
  expect_batch_error(batch(10, std::nullopt, std::nullopt), 4, {"global_batch_size 10", "data-parallel size 4"});
}

TEST(Config, ResolveWorldSize) {
  RunConfig c = parse_config(R"({"parallel": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
                                 "batch": {"global_batch_size": 24, "micro_batch_size": 2}})");
  c.resolve(12);
  EXPECT_EQ(c.parallel.data_parallel_size, 3);
  EXPECT_EQ(c.resolved_batch().gradient_accumulation_steps, 4);
  EXPECT_EQ(c.resolved_batch().per_rank(), 8);
  EXPECT_EQ(c.checkpoint.dir, "runs/default/checkpoints");  // resolved under train.out_dir
  RunConfig again = c;
  again.resolve(12);  // idempotent
  EXPECT_EQ(again, c);
  // The config against the world size is bad input (InputError: exit 64), naming the keys, the numbers and a fix.
  try {
    RunConfig d = parse_config(R"({"parallel": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4}})");
    d.resolve(12);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("world size 12 is not divisible by tp(2) × pp(4) = 8 "
                                         "(parallel.tensor_model_parallel_size × parallel.pipeline_model_parallel_size); "
                                         "launch a multiple of 8 ranks, or set tp × pp to a divisor of 12 "
                                         "(1, 2, 3, 4, 6, 12)"),
              std::string::npos)
        << e.what();
  }
  try {
    RunConfig d = parse_config(R"({"parallel": {"data_parallel_size": 3}})");
    d.resolve(4);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.data_parallel_size: 3, but world size 4"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("world size 4"), std::string::npos) << e.what();
  }
  try {
    RunConfig d = parse_config(R"({"batch": {"global_batch_size": 8}})");
    d.resolve(3);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("global_batch_size 8 is not divisible by data-parallel size 3"),
              std::string::npos)
        << e.what();
  }
  // dualpipev needs 2 × pp micro-batches per step: too few is a rule of the config and the world size, refused here
  // (before any work), naming the batch keys and values that work; enough resolves.
  const std::string dual = R"({"parallel": {"pipeline_model_parallel_size": 2, "schedule": "dualpipev"},
                                "batch": {"global_batch_size": 8, "micro_batch_size": 4}})";
  try {
    RunConfig d = parse_config(dual);
    d.resolve(2);
    ADD_FAILURE() << "dualpipev with 2 micro-batches on pp 2 resolved";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.schedule: dualpipev needs at least 4 micro-batches per step on "
                                         "pp_size 2, got 2"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--set batch.micro_batch_size=2 --set batch.gradient_accumulation_steps=4"),
              std::string::npos)
        << e.what();
  }
  RunConfig enough = parse_config(dual, "<string>", {"batch.micro_batch_size=2"});
  enough.resolve(2);
  EXPECT_EQ(enough.resolved_batch().gradient_accumulation_steps, 4);
}

// The refusals found once the world size is known (ep against an inferred dp, the sigmoid router's bias under
// ZeRO-3, dualpipev's micro-batches) name where their key came from, as the config reader's do: the file, or the
// --set argument that set it (the layout sweep found them without it).
TEST(Config, ResolveWithOriginNamesWhereTheKeyCameFrom) {
  const auto error_at = [](const std::string& text, const std::vector<std::string>& overrides, int world) {
    RunConfig c = parse_config(text, "run.json", overrides);
    try {
      c.resolve(world, "run.json", overrides);
    } catch (const InputError& e) {  // bad input (exit 64)
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ep = R"({"model": {"type": "moe", "d_model": 32, "n_heads": 4, "n_experts": 4, "top_k": 2},
                             "parallel": {"expert_model_parallel_size": 2}})";
  EXPECT_EQ(error_at(ep, {}, 1).rfind("config run.json: parallel.expert_model_parallel_size: 2 does not divide the "
                                      "dp × cp = 1 × 1 = 1 ranks",
                                      0),
            0u)
      << error_at(ep, {}, 1);
  const std::vector<std::string> set_ep = {"parallel.expert_model_parallel_size=2"};
  const std::string moe = R"({"model": {"type": "moe", "d_model": 32, "n_heads": 4, "n_experts": 4, "top_k": 2}})";
  EXPECT_EQ(error_at(moe, set_ep, 1).rfind("--set parallel.expert_model_parallel_size=2: "
                                           "parallel.expert_model_parallel_size: 2 does not divide",
                                           0),
            0u)
      << error_at(moe, set_ep, 1);
  const std::string sigmoid = R"({"model": {"type": "moe", "router": "sigmoid", "bias_update_rate": 0.001},
                                  "optimizer": {"zero_stage": 3}})";
  EXPECT_EQ(error_at(sigmoid, {}, 2).rfind("config run.json: model.bias_update_rate: 0.001 moves the sigmoid router's "
                                           "bias",
                                           0),
            0u)
      << error_at(sigmoid, {}, 2);
  const std::string dual = R"({"parallel": {"pipeline_model_parallel_size": 2, "schedule": "dualpipev"},
                               "batch": {"global_batch_size": 8, "micro_batch_size": 4}})";
  EXPECT_EQ(error_at(dual, {}, 2).rfind("config run.json: parallel.schedule: dualpipev needs at least 4 micro-batches "
                                        "per step on pp_size 2, got 2",
                                        0),
            0u)
      << error_at(dual, {}, 2);
  // The world against tp × cp × pp: filed under the first size that alone does not divide the world (else the
  // largest), with where it came from; the message still names every size. A config that fits resolves.
  const std::string tp = R"({"parallel": {"tensor_model_parallel_size": 2}})";
  EXPECT_EQ(error_at(tp, {}, 3).rfind("config run.json: parallel.tensor_model_parallel_size: world size 3 is not "
                                      "divisible by tp(2) × pp(1) = 2",
                                      0),
            0u)
      << error_at(tp, {}, 3);
  EXPECT_EQ(error_at(tp, {"parallel.pipeline_model_parallel_size=3"}, 3)
                .rfind("config run.json: parallel.tensor_model_parallel_size: world size 3 is not divisible by tp(2) × "
                       "pp(3) = 6",
                       0),
            0u)
      << error_at(tp, {"parallel.pipeline_model_parallel_size=3"}, 3);
  EXPECT_EQ(error_at("{}", {"parallel.pipeline_model_parallel_size=2", "parallel.tensor_model_parallel_size=2"}, 2)
                .rfind("--set parallel.pipeline_model_parallel_size=2: parallel.pipeline_model_parallel_size: world "
                       "size 2 is not divisible by tp(2) × pp(2) = 4",
                       0),
            0u);
  EXPECT_EQ(error_at(R"({"parallel": {"context_parallel_size": 2}})", {}, 3)
                .rfind("config run.json: parallel.context_parallel_size: world size 3 is not divisible by tp(1) × "
                       "cp(2) × pp(1) = 2",
                       0),
            0u);
  EXPECT_EQ(error_at(R"({"parallel": {"data_parallel_size": 3}})", {}, 2)
                .rfind("config run.json: parallel.data_parallel_size: 3, but world size 2 / (tp 1 × cp 1 × pp 1) = 2; "
                       "launch 3 ranks or set it to -1",
                       0),
            0u)
      << error_at(R"({"parallel": {"data_parallel_size": 3}})", {}, 2);
  EXPECT_EQ(error_at(dual, {"batch.micro_batch_size=2"}, 2), "no error");
}

TEST(Config, RoundTripIsIdentity) {
  const std::vector<std::string> configs = {
      "{}",
      R"({"model": {"type": "mlp", "in_features": 64, "hidden": [31], "num_classes": 10}, "data": {"type": "digits"},
          "optimizer": {"type": "sgd", "lr": 0.0123456789, "betas": [0.81, 0.997]}, "device": {"memory_limit": "3MiB"}})",
      R"({"model": {"type": "cnn", "channels": [3, 5], "kernel": 3, "pool": 2},
          "parallel": {"pipeline_model_parallel_size": 2, "partition": {"method": "manual", "blocks_per_stage": [4, 5]}},
          "train": {"seed": 12345678901234, "out_dir": "runs/ü"}, "batch": {"micro_batch_size": 3}})",
  };
  for (const auto& text : configs) {
    const RunConfig first = parse_config(text);
    const RunConfig second = parse_config(to_json(first), "to_json");
    EXPECT_EQ(first, second) << to_json(first);
    EXPECT_EQ(to_json(first), to_json(second));
    RunConfig resolved = first;
    resolved.resolve(2 * first.parallel.pipeline_model_parallel_size);
    EXPECT_EQ(parse_config(to_json(resolved), "to_json"), resolved) << to_json(resolved);
  }
  // A changed field changes the comparison (the equality itself can fail).
  RunConfig a = parse_config("{}");
  RunConfig b = a;
  b.model.gpt.n_layers += 1;
  EXPECT_NE(a, b);
}

// Keys whose field's convention is to do nothing in some mode are named, each once, with the value and why (the run
// logs these lines); their defaults, what every written config.json holds, are not.
TEST(Config, KeysWithoutEffectAreNamed) {
  const auto notes = [](const std::string& text) { return keys_without_effect(parse_config(text)); };
  EXPECT_TRUE(notes("{}").empty());
  EXPECT_TRUE(notes(R"({"optimizer": {"type": "sgd", "betas": [0.9, 0.999], "eps": 1e-8}})").empty());
  const std::vector<std::string> all = notes(R"({
    "optimizer": {"type": "sgd", "betas": [0.8, 0.95], "eps": 1e-6, "schedule": "constant", "min_lr": 0.001,
                  "zero_reduce": "per_step"},
    "train": {"eval_interval": 5, "eval_batches": 0},
    "data": {"type": "tokens", "path": "a.bin", "val_path": "b.bin", "val_fraction": 0.2}})");
  ASSERT_EQ(all.size(), 6u) << fmt::format("{}", fmt::join(all, "\n"));
  EXPECT_EQ(all[0], "optimizer.betas [0.8, 0.95] has no effect: it is AdamW's, and optimizer.type is \"sgd\"");
  EXPECT_EQ(all[1], "optimizer.eps 1e-06 has no effect: it is AdamW's, and optimizer.type is \"sgd\"");
  EXPECT_NE(all[2].find("optimizer.min_lr 0.001 has no effect: optimizer.schedule \"constant\""), std::string::npos);
  EXPECT_NE(all[3].find("optimizer.zero_reduce per_step has no effect with optimizer.zero_stage 0"), std::string::npos);
  EXPECT_EQ(all[4], "train.eval_interval 5 has no effect: train.eval_batches 0 turns evaluation off");
  EXPECT_NE(all[5].find("data.val_fraction 0.2 has no effect: data.val_path is the evaluation file"), std::string::npos);
  const std::vector<std::string> adamw = notes(R"({"optimizer": {"momentum": 0.5}})");
  ASSERT_EQ(adamw.size(), 1u);
  EXPECT_NE(adamw[0].find("optimizer.momentum 0.5 has no effect: it is SGD's"), std::string::npos);
}

// Keys that do nothing in the layout the run got: one stage (a partition method), one rank (a progress thread), no
// replica to reduce gradients over or shard over (bucket size, wire dtype, ZeRO stage). In a layout where they act,
// nothing is said.
TEST(Config, KeysWithoutEffectInTheLayoutAreNamed) {
  const RunConfig c = parse_config(R"({"parallel": {"partition": {"method": "uniform"}, "p2p_progress": "thread",
                                                     "dp_bucket_mb": 5, "grad_reduce_dtype": "bf16"},
                                       "optimizer": {"zero_stage": 2}})");
  const std::vector<std::string> alone = keys_without_effect_in_layout(c, {1, 1, 1});
  ASSERT_EQ(alone.size(), 5u) << fmt::format("{}", fmt::join(alone, "\n"));
  EXPECT_EQ(alone[0].find("parallel.partition.method uniform has no effect: the model runs as one stage"), 0u);
  EXPECT_EQ(alone[1].find("parallel.p2p_progress \"thread\" has no effect: the world is one rank"), 0u);
  EXPECT_EQ(alone[2].find("parallel.dp_bucket_mb 5 has no effect: data_parallel_size x context_parallel_size is 1"), 0u);
  EXPECT_EQ(alone[3].find("parallel.grad_reduce_dtype bf16 has no effect"), 0u);
  EXPECT_EQ(alone[4].find("optimizer.zero_stage 2 has no effect: data_parallel_size x context_parallel_size is 1"),
            0u);
  EXPECT_TRUE(keys_without_effect_in_layout(c, {4, 2, 2}).empty());
  // Two ranks of tensor parallelism: a progress thread has peers, but there is still no replica to reduce over.
  EXPECT_EQ(keys_without_effect_in_layout(c, {2, 2, 1}).size(), 3u);
  EXPECT_TRUE(keys_without_effect_in_layout(parse_config("{}"), {1, 1, 1}).empty());
}

// A run's config.json names checkpoint.dir in full (<out_dir>/checkpoints). Trained again with another
// train.out_dir, the derived checkpoint.dir follows it (a new run, not saves into the old run's checkpoints); a
// checkpoint.dir of the file's own, or one a --set gives, stays.
TEST(Config, WrittenConfigRetrainedElsewhereMovesItsCheckpoints) {
  RunConfig first = parse_config(R"({"train": {"out_dir": "runs/a"}})");
  first.resolve(1);
  ASSERT_EQ(first.checkpoint.dir, "runs/a/checkpoints");
  const std::string written = to_json(first);
  RunConfig again = parse_config(written, "runs/a/config.json", {"train.out_dir=runs/b"});
  again.resolve(1);
  EXPECT_EQ(again.checkpoint.dir, "runs/b/checkpoints");
  RunConfig same = parse_config(written, "runs/a/config.json", {"train.steps=7"});
  EXPECT_EQ(same.checkpoint.dir, "runs/a/checkpoints");  // out_dir unchanged (a resume): kept
  RunConfig pinned = parse_config(written, "runs/a/config.json",
                                  {"train.out_dir=runs/b", "checkpoint.dir=runs/a/checkpoints"});
  EXPECT_EQ(pinned.checkpoint.dir, "runs/a/checkpoints");  // given on the command line: kept
  RunConfig own = parse_config(R"({"train": {"out_dir": "runs/a"}, "checkpoint": {"dir": "/scratch/ck"}})", "c.json",
                               {"train.out_dir=runs/b"});
  EXPECT_EQ(own.checkpoint.dir, "/scratch/ck");  // not the derived one: kept
}

// With checkpoint.interval 0 and save_final false nothing is saved (but the preemption notice's checkpoint): the
// keys that shape the saves are named, each once; with either save on, or at their defaults, they are not.
TEST(Config, CheckpointKeysWithoutASaveAreNamed) {
  const auto notes = [](const std::string& text) { return keys_without_effect(parse_config(text)); };
  EXPECT_TRUE(notes(R"({"checkpoint": {"interval": 0, "save_final": false}})").empty());
  EXPECT_TRUE(notes(R"({"checkpoint": {"save_final": true, "keep_last": 2, "dir": "ck", "background": false}})").empty());
  EXPECT_TRUE(notes(R"({"checkpoint": {"interval": 5, "save_final": false, "keep_last": 2, "dir": "ck"}})").empty());
  const std::vector<std::string> idle =
      notes(R"({"checkpoint": {"save_final": false, "keep_last": 2, "dir": "ck", "background": false}})");
  ASSERT_EQ(idle.size(), 3u) << fmt::format("{}", fmt::join(idle, "\n"));
  const std::string why = "checkpoint.interval 0 and checkpoint.save_final false save no checkpoint";
  EXPECT_EQ(idle[0].find("checkpoint.keep_last 2 has no effect: " + why), 0u) << idle[0];
  EXPECT_EQ(idle[1].find("checkpoint.background false has no effect: " + why), 0u) << idle[1];
  EXPECT_EQ(idle[2].find("checkpoint.dir ck receives nothing: " + why), 0u) << idle[2];
  EXPECT_NE(idle[2].find("where --resume auto looks"), std::string::npos) << idle[2];
  // The resolved form (config.json after a run: dir filled in as <out_dir>/checkpoints) is the default, not named.
  RunConfig resolved = parse_config(R"({"checkpoint": {"save_final": false}, "train": {"out_dir": "r"}})");
  resolved.resolve(1);
  EXPECT_TRUE(keys_without_effect(resolved).empty()) << resolved.checkpoint.dir;
}

}  // namespace
}  // namespace cleave::config::config_test

namespace cleave::config::config_test {
namespace {

TEST(ConfigCommBackend, ChoicesAndNcclNeedsCudaAndAGpuDevice) {
  EXPECT_EQ(parse_config("{}", "run.json").parallel.comm_backend, CommBackend::kAuto);
  EXPECT_EQ(parse_config(R"({"parallel": {"comm_backend": "mpi"}})", "run.json").parallel.comm_backend, CommBackend::kMpi);
  expect_error(R"({"parallel": {"comm_backend": "gloo"}})", {"parallel.comm_backend", "gloo", "auto", "mpi", "nccl"});
  if (CLEAVE_WITH_CUDA) {
    expect_error(R"({"parallel": {"comm_backend": "nccl"}})",
                 {"parallel.comm_backend", "\"nccl\" carries GPU tensors", "device.type is \"cpu\"", "\"mpi\""});
    const auto gpu = parse_config(R"({"parallel": {"comm_backend": "nccl"}, "device": {"type": "cuda"}})", "run.json");
    EXPECT_EQ(gpu.parallel.comm_backend, CommBackend::kNccl);
  } else {
    expect_error(R"({"parallel": {"comm_backend": "nccl"}, "device": {"type": "cuda"}})",
                 {"parallel.comm_backend", "needs a build with CUDA and NCCL", "\"mpi\""});
  }
  // The resolved config written next to a run keeps the key.
  EXPECT_NE(to_json(parse_config(R"({"parallel": {"comm_backend": "mpi"}})", "run.json")).find("\"comm_backend\": \"mpi\""),
            std::string::npos);
}

}  // namespace
}  // namespace cleave::config::config_test

namespace cleave::config::config_test {
namespace {

TEST(ConfigRecompute, ChoicesAndOnlyForTransformers) {
  EXPECT_EQ(parse_config(R"({"train": {"recompute": "full"}})").train.recompute, Recompute::kFull);
  EXPECT_EQ(parse_config("{}").train.recompute, Recompute::kNone);
  try {
    parse_config(R"({"train": {"recompute": "some"}})", "run.json");
    ADD_FAILURE() << "recompute 'some' accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.recompute"), std::string::npos) << e.what();
  }
  try {
    parse_config(R"({"model": {"type": "mlp"}, "train": {"recompute": "selective"}, "data": {"type": "synthetic"}})",
                 "run.json");
    ADD_FAILURE() << "recompute for an mlp accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.recompute"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.type mlp has none"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::config::config_test

namespace cleave::config::config_test {
namespace {

TEST(ConfigP2PProgress, ChoicesDefaultAutoAndKeptInTheResolvedConfig) {
  EXPECT_EQ(parse_config("{}", "run.json").parallel.p2p_progress, P2PProgress::kAuto);
  for (const char* mode : {"auto", "thread", "off"}) {
    const std::string text = std::string(R"({"parallel": {"p2p_progress": ")") + mode + "\"}}";
    const RunConfig config = parse_config(text, "run.json");
    EXPECT_EQ(enum_name(config.parallel.p2p_progress), mode);
    EXPECT_NE(to_json(config).find(std::string("\"p2p_progress\": \"") + mode + "\""), std::string::npos) << mode;
  }
  expect_error(R"({"parallel": {"p2p_progress": "poll"}})", {"parallel.p2p_progress", "poll", "auto", "thread", "off"});
  expect_error(R"({"parallel": {"p2p_progress": true}})", {"parallel.p2p_progress"});
}

}  // namespace
}  // namespace cleave::config::config_test

namespace cleave::config::config_test {
namespace {

// A head dimension above what attention serves on the device (kernels/ops/attention_limits.hpp: 128 on CUDA, no
// limit on the CPU) is refused when the config is read, naming the numbers, not at the first forward on the GPU
// after the model was built there; checked before the build's backends, so it reads alike in every build.
TEST(ConfigDeviceKernels, CudaRefusesHeadsWiderThanItsAttentionKernels) {
  expect_error(R"({"model": {"d_model": 512, "n_heads": 2}, "device": {"type": "cuda"}})",
               {"model.n_heads", "2 heads of d_model 512 have 256 dimensions each", "at most 128", "at least 4",
                "device.type \"cpu\""});
  expect_error(R"({"model": {"type": "llama", "d_model": 768, "n_heads": 3, "n_kv_heads": 1}, "device": {"type": "cuda"}})",
               {"model.n_heads", "3 heads of d_model 768 have 256 dimensions each", "at least 6"});
  EXPECT_EQ(parse_config(R"({"model": {"d_model": 512, "n_heads": 2}})", "run.json").model.gpt.n_heads, 2);
  if (CLEAVE_WITH_CUDA) {  // 128 is the limit itself; a model without attention has no head dimension
    EXPECT_EQ(parse_config(R"({"model": {"d_model": 512, "n_heads": 4}, "device": {"type": "cuda"}})", "run.json")
                  .model.gpt.n_heads, 4);
    EXPECT_EQ(parse_config(R"({"model": {"type": "mlp"}, "data": {"type": "synthetic"}, "device": {"type": "cuda"}})",
                           "run.json").model.type, ModelType::kMlp);
  }
}

}  // namespace
}  // namespace cleave::config::config_test

