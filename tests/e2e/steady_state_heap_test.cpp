// The steady-state rule (docs/ops.md, "No heap allocation in the CPU kernel layer" and "... nor in the engine") on
// the single-rank CPU training path: after a warm-up, three training steps of a small GPT, Llama and MoE (dp 1), in
// fp32 and bf16, through OpenBLAS and (where built) oneDNN, GPT also with deterministic GEMM slicing, make no heap
// allocation in the kernel layer (heap_counter.hpp: global operator new, charged by call stack) and, on GPT and
// Llama, none in the engine at all: the count is exactly the counter's probe (one allocation made on purpose while
// counting, so a counter that sees nothing cannot pass). On MoE (softmax; sigmoid with a moving bias, the z loss and
// a gated shared expert) every owner is asserted (owners() below): zero, the router metrics at their bound (the
// step's returned fields), tensor storage printed (the experts' rows follow the routing, so a size not cached yet
// takes a new block); oneDNN's execute is printed, not asserted. A per-GEMM allocation, a Storage made with
// make_shared, a string built per layer call, a stash list or an executor map node made afresh each micro-batch, a
// trainer's vector per step fails it. CLEAVE_HEAP_SITES=N prints the largest sites too.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>

#include <cstdio>
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
  heap::probe();
  for (int s = 3; s < 6; ++s) trainer.step(s);
  return heap::stop();
}

const char* kMoe = R"({"type": "moe", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                       "seq_len": 32, "ffn_hidden_size": 48, "n_experts": 4, "top_k": 2, "router": "softmax",
                       "normalize_top_k": true, "aux_loss_coef": 0.01})";
// The other router and the block's other parts: a sigmoid router whose selection bias moves every step, the z loss,
// and a shared expert (a SwigluMlp every token runs through, gated).
const char* kMoeSigmoidShared = R"({"type": "moe", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4,
                       "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 48, "n_experts": 4, "top_k": 2,
                       "router": "sigmoid", "normalize_top_k": true, "aux_loss_coef": 0.01, "z_loss_coef": 0.001,
                       "bias_update_rate": 0.01, "n_shared_experts": 1, "shared_expert_gate": true})";

struct Case {
  std::string name;
  const char* model;
  std::vector<std::string> overrides;
  bool moe = false;  // a mixture-of-experts model: the owners held kWithoutMoe are printed, not asserted
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
      // MoE through OpenBLAS only: a oneDNN grouped GEMM remakes its memory objects when a group's row count
      // changes (docs/ops.md lists it), so the kernel layer allocates there by design.
      if (std::string(blas) == "openblas") {
        cases.push_back({"moe" + suffix, kMoe, o, /*moe=*/true});
        cases.push_back({"moe_sigmoid_shared" + suffix, kMoeSigmoidShared, o, /*moe=*/true});
      }
    }
  }
  return cases;
}

// The engine's allocations by owner (heap::by_owner: a site belongs to the first owner one of its frames names,
// innermost frame first; a tensor made in a layer is the storage's, a vector the optimizer builds the optimizer's).
// Held owners (Hold::kAlways) were brought to zero (or their per-step bound) in a steady-state step on one rank, the
// multi-rank ones also in steady_state_heap_mpi_test.cpp; kWithoutMoe ones are held on the dense models only.
// The router metrics' step fields (RouterMetrics::finish): the returned list and its one name past std::string's
// in-place buffer ("moe_load_imbalance"; the per-expert names fit while E < 100 000): the step's StepStats owns
// them, so they are made per step by design.
constexpr int kRouterMetricsPerStep = 2;

const std::vector<heap::Owner>& owners() {
  using heap::Hold;
  static const std::vector<heap::Owner> table = {
      heap::probe_owner(),
      {"optimizer (unique_params, norm, clipping)", {"cleave::optim::"}, Hold::kAlways},
      {"communicators", {"cleave::comm::"}, Hold::kAlways},
      {"context parallelism's CpLayout", {"CpLayout::"}, Hold::kAlways},
      {"router metrics (the step's fields)", {"RouterMetrics"}, Hold::kAlways, kRouterMetricsPerStep},
      {"expert dispatch", {"expert_dispatch", "ExpertDispatch", "plan_from_tensor", "plan_to_tensor"}, Hold::kAlways},
      // MoE: the experts' rows follow the routing, so a size not cached yet still takes a new block and node.
      {"tensor storage and the allocator's cache", {"cleave::Allocator::", "cleave::StoragePool"}, Hold::kWithoutMoe},
      {"stashes and the stage module's stash sets", {"cleave::layers::Stash", "cleave::pipeline::StageModule::"},
       Hold::kAlways},
      {"dense layers (linear, norms, embedding, activations, mlp, blocks, loss, head)",
       {"layers::Linear::", "layers::LayerNorm::", "layers::Embedding::", "layers::Activation::", "layers::Mlp::",
        "layers::TransformerBlock::", "layers::RmsNorm::", "layers::SoftmaxCrossEntropy::", "layers::LmHead::",
        "layers::new_activation", "layers::check_input", "layers::stash_at"},
       Hold::kAlways},
      {"attention and swiglu (lists of parts, callbacks)",
       {"Attention::", "attention_core", "SharedInputParts", "SwigluMlp"}, Hold::kAlways},
      {"moe layer (host routing, router log, shared expert gate)",
       {"layers::Moe", "layers::route", "router_backward", "balance_over", "layers::RouterLog", "layers::SharedExpert",
        "layers::forced_for_tokens", "balance_exchange"},
       Hold::kAlways},
      {"pipeline executor (slots, lists, outcome)", {"cleave::pipeline::"}, Hold::kAlways},
      // reduce_doubles is named by its caller: the step end's is the trainer's, the router metrics' theirs.
      {"trainer (data, step end, tail)",
       {"cleave::train::Trainer", "cleave::train::StepTail", "cleave::train::DataSource", "cleave::train::cp_shard"},
       Hold::kAlways},
  };
  return table;
}

class SteadyStateHeapTraining : public ::testing::TestWithParam<Case> {};

// GPT and Llama: the engine's count over three steps is exactly the probe's one allocation (every owner and the
// unnamed rest at zero). MoE: every held owner at zero or its bound; the storage of new sizes is printed.
TEST_P(SteadyStateHeapTraining, AllocatesNothingOfOurs) {
  const Case& c = GetParam();
  const heap::Counts counts = steady_state_allocations(small_model(c.model, c.overrides));
  const std::vector<heap::Site> sites = heap::sites();
  std::printf("%s: 3 steps made %s\n", c.name.c_str(), counts.str().c_str());
  const heap::ByOwner by = heap::by_owner(sites, owners());
  for (std::size_t i = 0; i <= owners().size(); ++i) {
    const bool named = i < owners().size();
    const char* name = named ? owners()[i].name : "other (no owner named)";
    if (by.count[i] > 0) std::printf("  %6lld  %s\n", static_cast<long long>(by.count[i]), name);
    const heap::Hold hold = named ? owners()[i].hold : heap::Hold::kWithoutMoe;
    if (hold == heap::Hold::kAlways || (hold == heap::Hold::kWithoutMoe && !c.moe)) {
      const int per_step = named ? owners()[i].per_step : 0;
      EXPECT_LE(by.count[i], 3 * per_step) << c.name << ": 3 steady-state steps made " << by.count[i]
                                           << " allocations of " << name << " (at most " << per_step << " a step), e.g. "
                                           << by.example[i];
    }
  }
  heap::print_largest_sites(sites);
  EXPECT_EQ(counts.kernels, 0) << c.name << ": 3 steady-state steps made " << counts.str();
  EXPECT_EQ(counts.unsited, 0) << c.name << ": the site table overflowed, so owners were not all counted";
  EXPECT_EQ(by.count[0], 1) << c.name << ": the probe's one allocation was counted " << by.count[0]
                            << " times: the counter does not see or name what is allocated while it counts";
  if (!c.moe) {
    EXPECT_EQ(counts.engine, 1) << c.name << ": 3 steady-state steps made " << counts.engine - 1
                                << " allocations of the engine (docs/ops.md: none on the dense models)";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SteadyStateHeapTraining, ::testing::ValuesIn(training_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace cleave::testing
