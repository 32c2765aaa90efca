// The config.json a run writes, pinned per model family: to_json of a resolved config (what the trainer writes,
// engine/train/train_loop.cpp, with one more newline) against a golden file in tests/unit/config/data/, byte for
// byte. RoundTripIsIdentity (config_test.cpp) proves the writer and the reader agree with each other; this proves
// the text itself does not move: a refactor of the fields tables, of a family's model section (its registration in
// partition/) or of the writer must leave every family's config.json as it was (the MoE refactor promised exactly
// that, and nothing held it). Each input is its family's example (examples/) as of the golden's writing, copied
// here so that editing an example does not move the golden.
//
// A deliberate change of the written text: the failure prints the new text; check that the change is intended
// (it changes every run's config.json, and a config written before must still read: the golden is also read back
// here), then replace the golden file with it.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/config/config.hpp"

namespace cleave::config::config_golden_test {
namespace {

struct Family {
  const char* name;  // model.type, and the golden's name: data/<name>.config.json
  const char* input;
  int world_size;    // resolve() at this many ranks, as a launch of the example would
};

// examples/gpt_fortunes.json
constexpr const char* kGpt = R"({
  "model": { "type": "gpt", "vocab_size": 256, "d_model": 128, "n_layers": 4, "n_heads": 4, "seq_len": 64,
             "tie_embeddings": true },
  "batch": { "global_batch_size": 16, "micro_batch_size": 8 },
  "optimizer": { "type": "adamw", "lr": 0.002, "weight_decay": 0.1, "betas": [0.9, 0.95], "grad_clip": 1.0,
                 "warmup_steps": 30, "schedule": "cosine", "min_lr": 0.0002 },
  "train": { "steps": 400, "seed": 1234, "log_interval": 20, "eval_interval": 50, "out_dir": "runs/gpt_fortunes" },
  "data": { "type": "text", "path": "/usr/share/games/fortunes/cookie", "val_fraction": 0.05 },
  "device": { "type": "cpu", "precision": "fp32" }
})";

// examples/llama/config.json
constexpr const char* kLlama = R"({
  "model": { "type": "llama", "vocab_size": 256, "d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2,
             "seq_len": 64, "rope_theta": 10000.0, "tie_embeddings": false },
  "batch": { "global_batch_size": 16, "micro_batch_size": 8 },
  "optimizer": { "type": "adamw", "lr": 0.002, "weight_decay": 0.1, "betas": [0.9, 0.95], "grad_clip": 1.0,
                 "warmup_steps": 30, "schedule": "cosine", "min_lr": 0.0002 },
  "train": { "steps": 400, "seed": 1234, "log_interval": 20, "eval_interval": 50, "out_dir": "runs/llama_fortunes" },
  "data": { "type": "text", "path": "/usr/share/games/fortunes/cookie", "val_fraction": 0.05 },
  "device": { "type": "cpu", "precision": "fp32" }
})";

// examples/mlp_digits.json
constexpr const char* kMlp = R"({
  "model": { "type": "mlp", "in_features": 64, "hidden": [128, 64], "num_classes": 10, "activation": "relu" },
  "batch": { "global_batch_size": 64, "micro_batch_size": 64 },
  "optimizer": { "type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0001, "warmup_steps": 0,
                 "schedule": "cosine" },
  "train": { "steps": 600, "seed": 7, "log_interval": 50, "out_dir": "runs/mlp_digits" },
  "data": { "type": "digits", "path": "data/digits.csv.gz" },
  "device": { "type": "cpu" }
})";

// examples/cnn_digits.json
constexpr const char* kCnn = R"({
  "model": { "type": "cnn", "in_channels": 1, "height": 8, "width": 8, "channels": [16, 32], "kernel": 3,
             "pool": 2, "num_classes": 10 },
  "batch": { "global_batch_size": 64, "micro_batch_size": 32 },
  "optimizer": { "type": "adamw", "lr": 0.003, "weight_decay": 0.0, "warmup_steps": 20, "schedule": "cosine" },
  "train": { "steps": 500, "seed": 7, "log_interval": 50, "eval_interval": 50, "out_dir": "runs/cnn_digits" },
  "data": { "type": "digits", "path": "../data/digits.csv.gz" },
  "device": { "type": "cpu" }
})";

// examples/moe/config.json (dp 2: launched on 2 ranks)
constexpr const char* kMoe = R"({
  "model": { "type": "moe", "vocab_size": 256, "d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2,
             "seq_len": 128, "ffn_hidden_size": 128, "n_experts": 8, "top_k": 2, "router": "softmax",
             "normalize_top_k": true, "aux_loss_coef": 0.01, "rope_theta": 10000.0, "tie_embeddings": true },
  "parallel": { "data_parallel_size": 2 },
  "batch": { "global_batch_size": 16, "micro_batch_size": 8 },
  "optimizer": { "type": "adamw", "lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95], "grad_clip": 1.0,
                 "warmup_steps": 30, "schedule": "cosine", "min_lr": 0.0003 },
  "train": { "steps": 600, "seed": 1234, "log_interval": 50, "eval_interval": 100, "eval_batches": 2,
             "out_dir": "runs/moe_fortunes" },
  "data": { "type": "text", "path": "/usr/share/games/fortunes/cookie", "val_fraction": 0.05 },
  "device": { "type": "cpu", "precision": "fp32" }
})";

constexpr Family kFamilies[] = {
    {"gpt", kGpt, 1}, {"llama", kLlama, 1}, {"mlp", kMlp, 1}, {"cnn", kCnn, 1}, {"moe", kMoe, 2},
};

std::string golden_path(const Family& f) {
  return std::string(CLEAVE_SOURCE_DIR) + "/tests/unit/config/data/" + f.name + ".config.json";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ConfigGolden, WrittenConfigIsByteIdenticalPerFamily) {
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    RunConfig config = parse_config(f.input, f.name);
    ASSERT_EQ(enum_name(config.model.type), f.name);
    config.resolve(f.world_size);
    const std::string got = to_json(config);
    const std::string golden = read_text(golden_path(f));
    EXPECT_EQ(got, golden) << golden_path(f) << " differs from the written text; the new text:\n" << got;
    // The golden is a config.json a run may be resumed or re-run from: it reads back as the config it came from.
    EXPECT_EQ(parse_config(golden, golden_path(f)), config) << golden_path(f) << " reads back as\n"
                                                           << to_json(parse_config(golden, golden_path(f)));
  }
}

// The comparison can fail: one key of one family changed moves the text.
TEST(ConfigGolden, ChangedFieldChangesTheText) {
  RunConfig config = parse_config(kMoe, "moe");
  config.resolve(2);
  const std::string before = to_json(config);
  config.model.moe.top_k = 1;
  EXPECT_NE(to_json(config), before);
}

}  // namespace
}  // namespace cleave::config::config_golden_test
