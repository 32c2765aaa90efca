// The steady-state rule (docs/architecture.md, "No allocation inside a steady-state step") on the CPU training path:
// after a warm-up, training steps of a small GPT and Llama, in fp32 and bf16, through each GEMM library this build
// has, make no heap allocation of ours (heap_counter.hpp: global operator new, charged by call stack). What oneDNN's
// execute and MPI allocate inside themselves is out of our reach; the test reports it and asserts nothing on it.
// A per-GEMM allocation (a slice plan, a oneDNN stream, argument map or memory object) fails it.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>

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

struct Case {
  const char* name;
  const char* model;
  std::vector<std::string> overrides;
};

TEST(SteadyStateHeap, TrainingStepsAllocateNothingOfOurs) {
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
      cases.push_back({"gpt", kGpt, o});
      cases.push_back({"gpt deterministic", kGpt, det});
      cases.push_back({"llama", kLlama, o});
    }
  }
  for (const Case& c : cases) {
    std::string what = c.name;
    for (const auto& o : c.overrides) what += " " + o;
    const heap::Counts counts = steady_state_allocations(small_model(c.model, c.overrides));
    std::printf("%s: 3 steps made %s\n", what.c_str(), counts.str().c_str());
    EXPECT_EQ(counts.kernels, 0) << what << ": 3 steady-state steps made " << counts.str();
  }
}

}  // namespace
}  // namespace cleave::testing
