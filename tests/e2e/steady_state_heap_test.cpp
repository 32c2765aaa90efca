// The steady-state rule (docs/ops.md, "No heap allocation in the CPU kernel layer" and "... in the engine") on the
// single-rank CPU training path: after a warm-up, three training steps of a small GPT, Llama and MoE (dp 1), in fp32
// and bf16, through OpenBLAS and (where built) oneDNN, GPT also with deterministic GEMM slicing, make no heap
// allocation in the kernel layer (heap_counter.hpp: global operator new, charged by call stack), and none in the
// engine owners brought to zero (Owner::bound below: the optimizer's lists, the communicators, the cp layout, tensor
// storage and the allocator's cache, stashes, the dense layers, attention and SwiGLU, the MoE layer's host routing
// and expert dispatch), and the router metrics at their bound (the step's returned fields). A per-GEMM allocation, a
// Storage made with make_shared, a string built per layer call, a stash list or a routing made afresh each
// micro-batch fails it. What the other owners, oneDNN's execute and MPI allocate is printed by owner, not asserted (docs/ops.md lists
// it); the engine's count must be non-zero, so a counter that sees nothing cannot pass. CLEAVE_HEAP_SITES=N prints
// the largest sites too.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <string>
#include <string_view>
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
  // The tensors' sizes change from step to step (MoE: the experts' rows follow the routing), so a size not seen
  // before still takes a new block and a cache node: tensor storage is printed, not asserted.
  bool varying_sizes = false;
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
        cases.push_back({"moe" + suffix, kMoe, o, true});
        cases.push_back({"moe_sigmoid_shared" + suffix, kMoeSigmoidShared, o, true});
      }
    }
  }
  return cases;
}

// The engine's allocation sites by owner: a site belongs to the first rule one of its frames matches, innermost frame
// first (a tensor made in a layer is the storage's; a vector the optimizer builds is the optimizer's). Owners with a
// bound were brought to it in a steady-state step and are asserted (the optimizer's lists, the communicators and
// the cp layout also in the multi-rank test, steady_state_heap_mpi_test.cpp); the others are printed: those of ours
// that remain (docs/ops.md lists them).
constexpr int kPrinted = -1;
struct Owner {
  const char* name;
  std::vector<const char*> frames;  // a frame whose name contains one of these belongs to this owner
  int bound;  // allocations per step at most (0: none), or kPrinted
};
// The router metrics' step fields (RouterMetrics::finish): the returned list (reserved once) and its one name past
// std::string's in-place buffer ("moe_load_imbalance"; the per-expert names fit while E < 100 000): the step's
// StepStats owns them, so they are made per step by design.
constexpr int kRouterMetricsPerStep = 2;

const std::vector<Owner>& owners() {
  static const std::vector<Owner> table = {
      {"optimizer (unique_params, norm, clipping)", {"cleave::optim::"}, 0},
      {"communicators", {"cleave::comm::"}, 0},
      {"context parallelism's CpLayout", {"CpLayout::"}, 0},
      {"router metrics (the step's fields)", {"RouterMetrics"}, kRouterMetricsPerStep},
      {"expert dispatch", {"expert_dispatch", "ExpertDispatch", "plan_from_tensor", "plan_to_tensor"}, 0},
      {"tensor storage and the allocator's cache", {"cleave::Allocator::", "cleave::StoragePool"}, 0},
      {"stashes and the stage module's stash sets", {"cleave::layers::Stash", "cleave::pipeline::StageModule::"}, 0},
      {"dense layers (linear, norms, embedding, activations, mlp, blocks, loss, head)",
       {"layers::Linear::", "layers::LayerNorm::", "layers::Embedding::", "layers::Activation::", "layers::Mlp::",
        "layers::TransformerBlock::", "layers::RmsNorm::", "layers::SoftmaxCrossEntropy::", "layers::LmHead::",
        "layers::new_activation", "layers::check_input", "layers::stash_at"},
       0},
      {"attention and swiglu (lists of parts, callbacks)",
       {"Attention::", "attention_core", "SharedInputParts", "SwigluMlp"}, 0},
      {"moe layer (host routing, router log, shared expert gate)",
       {"layers::Moe", "layers::route", "router_backward", "balance_over", "layers::RouterLog", "layers::SharedExpert",
        "layers::forced_for_tokens", "balance_exchange"},
       0},
      {"pipeline executor", {"cleave::pipeline::"}, kPrinted},
      {"trainer (data, step end)", {"cleave::train::"}, kPrinted},
  };
  return table;
}

// The owner of a site: an index into owners(), or owners().size() when no rule matches.
std::size_t owner_of(const heap::Site& site) {
  for (const std::string& frame : site.frames) {
    for (std::size_t i = 0; i < owners().size(); ++i) {
      const std::string_view name(frame.data(), std::min(frame.find('('), frame.size()));  // not the parameters
      for (const char* part : owners()[i].frames) {
        if (name.find(part) != std::string_view::npos) return i;
      }
    }
  }
  return owners().size();
}

// CLEAVE_HEAP_SITES=N also prints the N largest sites, grouped by their innermost CLEAVE_HEAP_SITE_DEPTH frames (1).
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
    std::printf("    %6lld  %s\n", static_cast<long long>(largest[i].first), largest[i].second.c_str());
  }
}

class SteadyStateHeapTraining : public ::testing::TestWithParam<Case> {};

TEST_P(SteadyStateHeapTraining, AllocatesNothingOfOurs) {
  const Case& c = GetParam();
  const heap::Counts counts = steady_state_allocations(small_model(c.model, c.overrides));
  const std::vector<heap::Site> sites = heap::sites();
  std::printf("%s: 3 steps made %s\n", c.name.c_str(), counts.str().c_str());
  std::vector<std::int64_t> by_owner(owners().size() + 1, 0);
  std::vector<std::string> example(owners().size() + 1);
  for (const heap::Site& site : sites) {
    const std::size_t owner = owner_of(site);
    by_owner[owner] += site.count;
    if (example[owner].empty()) example[owner] = site.str(4);
  }
  for (std::size_t i = 0; i <= owners().size(); ++i) {
    const char* name = i < owners().size() ? owners()[i].name : "other";
    if (by_owner[i] > 0) std::printf("  %6lld  %s\n", static_cast<long long>(by_owner[i]), name);
    const bool storage = i < owners().size() && std::string_view(owners()[i].frames.front()) == "cleave::Allocator::";
    if (i < owners().size() && owners()[i].bound != kPrinted && !(storage && c.varying_sizes)) {
      EXPECT_LE(by_owner[i], 3 * owners()[i].bound)
          << c.name << ": 3 steady-state steps made " << by_owner[i] << " allocations of " << name << " (at most "
          << owners()[i].bound << " a step), e.g. " << example[i];
    }
  }
  print_sites(sites);
  EXPECT_EQ(counts.kernels, 0) << c.name << ": 3 steady-state steps made " << counts.str();
  EXPECT_GT(counts.engine, 0) << c.name << ": the engine above the kernels allocates (docs/ops.md): a count of 0 "
                                           "says the counter saw nothing";
}

INSTANTIATE_TEST_SUITE_P(Cases, SteadyStateHeapTraining, ::testing::ValuesIn(training_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace cleave::testing
