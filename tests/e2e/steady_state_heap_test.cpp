// The steady-state rule (docs/ops.md, "No heap allocation in the CPU kernel layer") on the CPU training path: after
// a warm-up, three training steps of a small GPT and Llama, in fp32 and bf16, through OpenBLAS and (where built)
// oneDNN, with default and deterministic GEMM slicing, make no heap allocation in the kernel layer
// (heap_counter.hpp: global operator new, charged by call stack). A per-GEMM allocation (a slice plan, a oneDNN
// stream, argument map or memory object), a multi-tensor kernel's work list or an attention view list fails it. What
// the engine above the kernels, oneDNN's execute and MPI allocate is printed, not asserted (docs/ops.md lists it);
// the engine's count must be non-zero, so a counter that sees nothing cannot pass.
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

// The counter sees what it must: a string a kernel-layer function builds is charged to the kernel layer (a build
// whose symbols dladdr cannot name would charge everything as unnamed, and the test below could not fail).
TEST(SteadyStateHeap, TheCounterChargesTheKernelLayer) {
  heap::start();
  const std::string description = kernels::cpu::gemm_backend_description(kernels::cpu::GemmBackend::kOpenBlas);
  const heap::Counts counts = heap::stop();
  ASSERT_GT(description.size(), 15u) << "a string this short may fit in place and allocate nothing";
  EXPECT_GT(counts.kernels, 0) << counts.str();
  EXPECT_EQ(counts.unnamed, 0) << counts.str();
}

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
    EXPECT_GT(counts.engine, 0) << what << ": the engine above the kernels allocates (docs/ops.md): a count of 0 says "
                                           "the counter saw nothing";
  }
}

}  // namespace
}  // namespace cleave::testing
