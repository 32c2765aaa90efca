// Shared pieces of the training tests: a tiny model config, a run that records per-step losses and the
// final logical parameters, and comparisons that report the worst element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "engine/train/threads.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::testing {

struct RunRecord {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::map<std::string, std::vector<float>> params;
};

// Sizes the kernels' thread pools for the ranks sharing this node (once per process, like the CLI).
class ThreadsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { train::configure_threads_for_node(); }
};
inline const auto* const kThreadsEnvironment = ::testing::AddGlobalTestEnvironment(new ThreadsEnvironment);

inline RunRecord train_steps(const config::RunConfig& config, comm::Communicator& world) {
  train::Trainer trainer(config, world);
  RunRecord record;
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    const auto stats = trainer.step(s);
    record.losses.push_back(stats.loss);
    record.grad_norms.push_back(stats.grad_norm);
  }
  record.params = trainer.gather_parameters();
  return record;
}

// The same run on one rank: no pipeline, tensor, context or data parallelism, plain 1F1B, no ZeRO; the global batch
// (and so the losses) unchanged, gradient accumulation re-derived from it.
inline config::RunConfig single_rank_config(config::RunConfig config) {
  config.parallel.pipeline_model_parallel_size = 1;
  config.parallel.tensor_model_parallel_size = 1;
  config.parallel.sequence_parallel = false;
  config.parallel.context_parallel_size = 1;
  config.parallel.expert_model_parallel_size = 1;
  config.optimizer.zero_stage = 0;
  config.parallel.data_parallel_size = -1;
  config.parallel.schedule = "1f1b";
  config.parallel.virtual_pipeline_stages = 1;
  config.batch.gradient_accumulation_steps.reset();
  return config;
}

// Max relative difference |a-b| / max(|a|, |b|, floor) over all parameters; names must match.
inline double max_param_rel_diff(const RunRecord& a, const RunRecord& b, std::string* worst = nullptr) {
  double max_rel = 0;
  EXPECT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, values] : a.params) {
    auto it = b.params.find(name);
    if (it == b.params.end()) {
      ADD_FAILURE() << "parameter " << name << " missing in the second run";
      continue;
    }
    EXPECT_EQ(values.size(), it->second.size()) << name;
    for (std::size_t i = 0; i < std::min(values.size(), it->second.size()); ++i) {
      const double x = values[i], y = it->second[i];
      const double rel = std::abs(x - y) / std::max({std::abs(x), std::abs(y), 1e-3});
      if (rel > max_rel) {
        max_rel = rel;
        if (worst) *worst = name + "[" + std::to_string(i) + "]";
      }
    }
  }
  return max_rel;
}

// Max over tensors of max|a - b| / max|b|: differences measured against each tensor's own scale (the bf16 and
// tensor-parallel measure: there the element-wise relative difference is dominated by elements near zero, a
// bias a few bf16 rounding steps from it, which says nothing about whether the layout trains the same model).
inline double max_scaled_param_diff(const RunRecord& a, const RunRecord& b, std::string* worst = nullptr) {
  double out = 0;
  for (const auto& [name, values] : a.params) {
    const auto& other = b.params.at(name);
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(values[i] - other[i])));
      scale = std::max(scale, static_cast<double>(std::abs(other[i])));
    }
    const double scaled = diff / std::max(scale, 1e-30);
    if (scaled > out) {
      out = scaled;
      if (worst) *worst = name;
    }
  }
  return out;
}

inline double max_loss_rel_diff(const RunRecord& a, const RunRecord& b) {
  double max_rel = 0;
  EXPECT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < std::min(a.losses.size(), b.losses.size()); ++i) {
    max_rel = std::max(max_rel, std::abs(a.losses[i] - b.losses[i]) / std::abs(b.losses[i]));
  }
  return max_rel;
}

// Max relative difference |a-b| / |b| of the per-step gradient norms (b the reference).
inline double max_grad_norm_rel_diff(const RunRecord& a, const RunRecord& b) {
  double max_rel = 0;
  EXPECT_EQ(a.grad_norms.size(), b.grad_norms.size());
  for (std::size_t i = 0; i < std::min(a.grad_norms.size(), b.grad_norms.size()); ++i) {
    max_rel = std::max(max_rel, std::abs(a.grad_norms[i] - b.grad_norms[i]) / b.grad_norms[i]);
  }
  return max_rel;
}

}  // namespace cleave::testing
