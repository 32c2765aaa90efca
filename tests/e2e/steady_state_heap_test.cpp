// The steady-state rule (docs/ops.md, "No heap allocation in the CPU kernel layer") on the CPU training path: after
// a warm-up, three training steps of a small GPT and Llama, in fp32 and bf16, through OpenBLAS and (where built)
// oneDNN, with default and deterministic GEMM slicing, make no heap allocation in the kernel layer
// (heap_counter.hpp: global operator new, charged by call stack). A per-GEMM allocation (a slice plan, a oneDNN
// stream, argument map or memory object), a multi-tensor kernel's work list or an attention view list fails it. What
// the engine above the kernels, oneDNN's execute and MPI allocate is printed, not asserted (docs/ops.md lists it);
// the engine's count must be non-zero, so a counter that sees nothing cannot pass.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <string>
#include <vector>

#include "heap_counter.hpp"
#include "kernels/cpu/gemm_backend.hpp"
#include "mpi/mpi_test_env.hpp"
#include "train_harness.hpp"

namespace cleave::testing {
namespace {

// GEMMs of 256 rows (a micro-batch of 8 sequences of 32): large enough to be sliced over the OpenMP team.
config::RunConfig small_model(const std::string& model, const std::vector<std::string>& overrides) {
  return config::parse_config(R"({"model": )" + model + R"(,
    "batch": {"global_batch_size": 16, "micro_batch_size": 8},
    "optimizer": {"type": "adamw", "lr": 0.003, "warmup_steps": 2, "grad_clip": 1.0},
    "train": {"seed": 3, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", "small_model", overrides);
}

const char* kGpt = R"({"type": "gpt", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 32})";
const char* kLlama = R"({"type": "llama", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4,
                         "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 96})";

heap::Counts steady_state_allocations(const config::RunConfig& config) {
  auto world = make_world();
  train::Trainer trainer(config, *world);
  for (int s = 0; s < 3; ++s) trainer.step(s);
  heap::start();
  for (int s = 3; s < 6; ++s) trainer.step(s);
  return heap::stop();
}

const char* kMoe = R"({"type": "moe", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                       "seq_len": 32, "ffn_hidden_size": 48, "n_experts": 4, "top_k": 2, "router": "softmax",
                       "normalize_top_k": true, "aux_loss_coef": 0.01})";

struct Case {
  std::string name;
  const char* model;
  std::vector<std::string> overrides;
};

std::vector<Case> training_cases() {
  std::vector<Case> cases;
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* blas : {"openblas", "onednn"}) {
      if (std::string(blas) == "onednn" && !kernels::cpu::gemm_backend_built(kernels::cpu::GemmBackend::kOneDnn)) {
        continue;
      }
      const std::vector<std::string> o = {std::string("device.precision=") + precision,
                                          std::string("device.blas=") + blas};
      std::vector<std::string> det = o;
      det.push_back("train.deterministic=true");
      const std::string suffix = std::string("_") + precision + "_" + blas;
      cases.push_back({"gpt" + suffix, kGpt, o});
      cases.push_back({"gpt_deterministic" + suffix, kGpt, det});
      cases.push_back({"llama" + suffix, kLlama, o});
      cases.push_back({"moe" + suffix, kMoe, o});
    }
  }
  return cases;
}

// CLEAVE_HEAP_SITES=N prints the N largest sites, grouped by their innermost CLEAVE_HEAP_SITE_DEPTH frames (1).
void print_sites(const std::vector<heap::Site>& sites) {
  const char* n = std::getenv("CLEAVE_HEAP_SITES");
  if (n == nullptr) return;
  const char* depth = std::getenv("CLEAVE_HEAP_SITE_DEPTH");
  std::map<std::string, std::int64_t> grouped;
  for (const heap::Site& s : sites) grouped[s.str(depth != nullptr ? std::stoul(depth) : 1)] += s.count;
  std::vector<std::pair<std::int64_t, std::string>> largest;
  for (const auto& [site, count] : grouped) largest.emplace_back(count, site);
  std::sort(largest.rbegin(), largest.rend());
  for (std::size_t i = 0; i < largest.size() && i < std::stoul(n); ++i) {
    std::printf("  %6lld  %s\n", static_cast<long long>(largest[i].first), largest[i].second.c_str());
  }
}

class SteadyStateHeapTraining : public ::testing::TestWithParam<Case> {};

TEST_P(SteadyStateHeapTraining, AllocatesNothingOfOurs) {
  const Case& c = GetParam();
  std::string what = c.name;
  const heap::Counts counts = steady_state_allocations(small_model(c.model, c.overrides));
  std::printf("%s: 3 steps made %s\n", what.c_str(), counts.str().c_str());
  print_sites(heap::sites());
  EXPECT_EQ(counts.kernels, 0) << what << ": 3 steady-state steps made " << counts.str();
  EXPECT_GT(counts.engine, 0) << what << ": the engine above the kernels allocates (docs/ops.md): a count of 0 says "
                                         "the counter saw nothing";
}

INSTANTIATE_TEST_SUITE_P(Cases, SteadyStateHeapTraining, ::testing::ValuesIn(training_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace cleave::testing
