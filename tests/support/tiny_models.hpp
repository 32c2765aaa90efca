// The tiny language models the e2e layout tests train (tests/e2e: data_parallel, llama_equivalence,
// mixed_precision, moe_equivalence, pipeline_equivalence, sequence_parallel), written once so that a layout
// test states only its layouts and bounds, and two tests that say "the tiny llama" train the same one.
//
// Every run is the same around its model: a global batch of 8 in micro-batches of 1, SGD (lr 0.05, momentum
// 0.9, weight decay at its default 0.01) with no clipping and no warm-up, seed 5, deterministic GEMMs, synthetic
// data and no evaluation.
// `overrides` (the --set form, "key.path=value") apply after the builder's own train.steps (and the moe's
// batch), so a test can change any key. Extend it with a model section and its default steps; a test whose
// run differs beyond a few keys keeps its own JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.hpp"

namespace cleave::testing {

// The run above around `model` (the "model" section's JSON), named `name` in config errors, training
// `steps` steps unless an override says otherwise.
inline config::RunConfig tiny_run(const std::string& model, const std::string& name, std::int64_t steps,
                                  const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"train.steps=" + std::to_string(steps)};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_config(R"({"model": )" + model + R"(,
    "batch": {"global_batch_size": 8, "micro_batch_size": 1},
    "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "grad_clip": 0.0, "warmup_steps": 0},
    "train": {"seed": 5, "deterministic": true, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", name, all);
}

// gpt: vocabulary 96, d_model 32, 4 layers of 4 heads, sequence 16 (head tied, gpt's default); 6 steps.
inline config::RunConfig tiny_gpt(const std::vector<std::string>& overrides = {}) {
  return tiny_run(R"({"type": "gpt", "vocab_size": 96, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16})",
                  "tiny_gpt", 6, overrides);
}

// llama: gpt's sizes with 4 query heads over 2 key/value heads and a SwiGLU of width 48, untied unless told;
// 5 steps.
inline config::RunConfig tiny_llama(const std::vector<std::string>& overrides = {}) {
  return tiny_run(R"({"type": "llama", "vocab_size": 96, "d_model": 32, "n_layers": 4, "n_heads": 4,
                      "n_kv_heads": 2, "seq_len": 16, "ffn_hidden_size": 48})",
                  "tiny_llama", 5, overrides);
}

// moe: vocabulary 64, d_model 16, 4 layers of 2 heads (2 key/value heads), sequence 8, 4 experts of width 12
// with top-2 routing, the auxiliary loss at 0.05 and the z-loss at 0.01; a global batch of 4; 4 steps.
inline config::RunConfig tiny_moe(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"batch.global_batch_size=4"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return tiny_run(R"({"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 4, "n_heads": 2,
                      "n_kv_heads": 2, "seq_len": 8, "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2,
                      "aux_loss_coef": 0.05, "z_loss_coef": 0.01})",
                  "tiny_moe", 4, all);
}

// The expert-parallel tests' moe (tests/e2e/ep_*): vocabulary 64, d_model 16, `n_layers` layers of 2 heads (2
// key/value heads), sequence 8, 4 experts of width 12 with top-2 routing, the auxiliary loss at 0.05 and the z-loss
// at 0.01; AdamW (lr 0.01, no clipping, no warm-up, weight decay at its default) from seed 11, a global batch of 8 in
// micro-batches of 1, deterministic GEMMs, synthetic data, no evaluation. `name` names the run in config errors.
inline config::RunConfig tiny_ep_moe(const std::string& name, int n_layers, std::int64_t steps,
                                     const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"train.steps=" + std::to_string(steps)};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_config(R"({
    "model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": )" + std::to_string(n_layers) + R"(,
              "n_heads": 2, "n_kv_heads": 2, "seq_len": 8, "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2,
              "aux_loss_coef": 0.05, "z_loss_coef": 0.01},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1},
    "optimizer": {"type": "adamw", "lr": 0.01, "grad_clip": 0.0, "warmup_steps": 0},
    "train": {"seed": 11, "deterministic": true, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", name, all);
}

// tiny_ep_moe (2 layers) with every ZeRO mechanism engaged: weight decay 0.1, clipping at 0.5 and 1 KB data-parallel
// buckets (so that a step fills several); the ep ZeRO tests' run (tests/e2e/ep_zero_test, ep_eight_ranks_test).
inline config::RunConfig tiny_ep_moe_zero(const std::string& name, std::int64_t steps,
                                          const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"optimizer.weight_decay=0.1", "optimizer.grad_clip=0.5", "parallel.dp_bucket_mb=0.001"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return tiny_ep_moe(name, 2, steps, all);
}

}  // namespace cleave::testing
