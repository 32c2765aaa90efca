// The steady-state rule (docs/ops.md, "No heap allocation in the CPU kernel layer" and "... nor in the engine") on
// the single-rank CPU training path: after a warm-up, three training steps of a small GPT, Llama and MoE (dp 1), in
// fp32 and bf16, through OpenBLAS and (where built) oneDNN, GPT also with deterministic GEMM slicing, make no heap
// allocation in the kernel layer (heap_counter.hpp: global operator new, charged by call stack) and, on GPT and
// Llama, none in the engine at all: the count is exactly the counter's probe (one allocation made on purpose while
// counting, so a counter that sees nothing cannot pass). On MoE (softmax; sigmoid with a moving bias, the z loss and
// a gated shared expert) every owner is asserted (owners() below) zero, the router metrics' step fields included
// (rewritten in place, StepStats::routing a view of them); tensor storage printed (the experts' rows follow the routing, so a size not cached yet
// takes a new block); oneDNN's execute is printed, not asserted. A per-GEMM allocation, a Storage made with
// make_shared, a string built per layer call, a stash list or an executor map node made afresh each micro-batch, a
// trainer's vector per step fails it. The *_traced_run cases (GPT, MoE) count three steps inside a whole
// Trainer::train with train.trace on, metrics.jsonl written and the progress line printed every step, so the measured
// timeline's spans, the metrics row and the progress line are held to the same zero (a timeline list, a JSON object
// or a formatted string per step fails them); SteadyStateHeapProgress holds the live bar (a terminal's) to it too. CLEAVE_HEAP_SITES=N prints the
// largest sites too.
// C allocations (malloc and kin, c_alloc_counter.cpp) are printed by owner beside them, oneDNN's own outside its
// execute apart; the kernel layer's are asserted zero. SteadyStateHeapOps holds the op seam's oneDNN GEMMs, grouped
// ones with row counts changing every call included, to no operator new of ours and a bounded count of oneDNN memory
// objects.
// Runs in-process (MPI singleton world of one).
#include <gtest/gtest.h>
#include <omp.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/rng.hpp"
#include "engine/train/metrics.hpp"
#include "heap_counter.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/ops.hpp"
#include "kernels/cpu/gemm_backend.hpp"
#include "mpi/mpi_test_env.hpp"
#include "train_harness.hpp"

namespace cleave::testing::steady_state_heap_test {
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

// The same three steps inside the whole run (Trainer::train): with train.trace on (the measured timeline recorded
// every step) and metrics.jsonl written, counted from the end of step 3 to the end of step 6 of a 7-step run
// (TrainOptions::after_step), so the loop's own work per step (the metrics row, the progress line: printed every step,
// train.log_interval=1; the summary's list, the checkpoint and evaluation cadence) is counted with the step. No
// checkpoint, no evaluation; the files are written to a directory of this process's own, removed after. The progress
// lines (stderr) are captured, so a run that printed none fails.
heap::Counts steady_state_allocations_in_run(const char* model, std::vector<std::string> overrides,
                                             const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cleave_heap_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  overrides.insert(overrides.end(), {"train.out_dir=" + dir.string(), "train.trace=true", "train.steps=7",
                                     "train.log_interval=1", "train.report=false", "checkpoint.save_final=false"});
  auto world = make_world();
  train::Trainer trainer(small_model(model, overrides), *world);
  heap::Counts counts;
  train::TrainOptions options;
  options.after_step = [&counts](std::int64_t steps_done) {
    if (steps_done == 3) {
      heap::start();
      heap::probe();
    }
    if (steps_done == 6) counts = heap::stop();
  };
  ::testing::internal::CaptureStderr();  // a file descriptor redirected: writing to it allocates nothing of ours
  const train::TrainSummary summary = trainer.train(options);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(summary.completed);
  for (const char* line : {"step 4/7 | loss", "step 5/7 | loss", "step 6/7 | loss"}) {
    EXPECT_NE(printed.find(line), std::string::npos) << "no progress line \"" << line << "\" in:\n" << printed;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "trace.json")) << "the run recorded no timeline";
  std::ifstream metrics(dir / "metrics.jsonl");
  const auto rows = std::count(std::istreambuf_iterator<char>(metrics), std::istreambuf_iterator<char>(), '\n');
  EXPECT_EQ(rows, 7) << "metrics.jsonl holds " << rows << " rows, not one per step";
  std::filesystem::remove_all(dir);
  return counts;
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
  bool whole_run = false;  // counted inside Trainer::train, train.trace on and metrics written
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
      // MoE on oneDNN too: a grouped GEMM's group remakes its oneDNN memory objects when its row count changes,
      // which allocates inside oneDNN's dnnl_memory_create only (C allocations, printed), nothing of ours.
      cases.push_back({"moe" + suffix, kMoe, o, /*moe=*/true});
      if (std::string(blas) == "openblas") {
        cases.push_back({"moe_sigmoid_shared" + suffix, kMoeSigmoidShared, o, /*moe=*/true});
      }
    }
  }
  // The whole run with its per-step outputs: the measured timeline and the metrics row (the MoE's with its routing
  // fields, whose names pass std::string's in-place buffer).
  const std::vector<std::string> fp32 = {"device.precision=fp32", "device.blas=openblas"};
  cases.push_back({"gpt_traced_run", kGpt, fp32, /*moe=*/false, /*whole_run=*/true});
  cases.push_back({"moe_traced_run", kMoe, fp32, /*moe=*/true, /*whole_run=*/true});
  return cases;
}

// The engine's allocations by owner (heap::by_owner: a site belongs to the first owner one of its frames names,
// innermost frame first; a tensor made in a layer is the storage's, a vector the optimizer builds the optimizer's).
// Held owners (Hold::kAlways) were brought to zero (or their per-step bound) in a steady-state step on one rank, the
// multi-rank ones also in steady_state_heap_mpi_test.cpp; kWithoutMoe ones are held on the dense models only.

const std::vector<heap::Owner>& owners() {
  using heap::Hold;
  static const std::vector<heap::Owner> table = {
      heap::probe_owner(),
      {"optimizer (unique_params, norm, clipping)", {"cleave::optim::"}, Hold::kAlways},
      {"communicators", {"cleave::comm::"}, Hold::kAlways},
      {"context parallelism's CpLayout", {"CpLayout::"}, Hold::kAlways},
      {"router metrics (the step's fields, rewritten in place)", {"RouterMetrics"}, Hold::kAlways},
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
      {"measured timeline (train.trace: spans, marks' times, the trainer's copy)", {"EventTimeline", "TimedWaiter"},
       Hold::kAlways},
      {"metrics row (train loop: the row, its JSON text)", {"MetricsWriter", "JsonLine", "fill_metrics_row"},
       Hold::kAlways},
      {"progress line (its text, the live bar's)",
       {"ProgressPrinter", "append_router_progress", "cleave::train::format_"}, Hold::kAlways},
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
  const heap::Counts counts = c.whole_run ? steady_state_allocations_in_run(c.model, c.overrides, c.name)
                                          : steady_state_allocations(small_model(c.model, c.overrides));
  const std::vector<heap::Site> sites = heap::sites();
  std::printf("%s: 3 steps made %s\n", c.name.c_str(), counts.str().c_str());
  if (const std::optional<heap::Counts> c_counts = heap::c_allocations()) {
    std::printf("  and C allocations (malloc and kin): %s\n", c_counts->str().c_str());
    EXPECT_EQ(c_counts->kernels, 0) << c.name << ": C allocations of 3 steady-state steps: " << c_counts->str();
  }
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

// The progress printer as a terminal sees it (live: the kept line and every step's bar, a MoE run's routing tail):
// after a warm-up step, four more steps' lines and bars allocate nothing but the probe; the file they went to holds
// them, so a printer that printed nothing fails.
TEST(SteadyStateHeapProgress, LinesAndLiveBarAllocateNothingOnceWarm) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  train::ProgressPrinter printer(/*total_steps=*/64, /*log_interval=*/2, "tok", out, /*live=*/true);
  train::StepMetrics m;
  m.loss = 2.5, m.lr = 3e-4, m.grad_norm = 0.75, m.tokens_per_s = 12345.0, m.flops_per_rank = 1.5e12, m.mfu = 0.41;
  m.step_ms = 84.1, m.peak_bytes = std::int64_t{123} << 20, m.nonfinite_steps = 1;
  m.extra = {{"moe_tokens_e0", 4096.0}, {"moe_aux_loss", 0.0123}, {"moe_load_imbalance", 1.31}};
  const auto step = [&](std::int64_t s) {
    m.step = s;
    m.loss -= 0.01;
    m.nonfinite_steps += s == 5 ? 1 : 0;  // a new non-finite step: its line printed off the interval
    printer.update(m);
  };
  step(1);
  heap::start();
  heap::probe();
  for (std::int64_t s = 2; s <= 5; ++s) step(s);
  const heap::Counts counts = heap::stop();
  const std::vector<heap::Site> sites = heap::sites();
  const heap::ByOwner by = heap::by_owner(sites, owners());
  std::printf("4 progress updates made %s\n", counts.str().c_str());
  EXPECT_EQ(counts.engine, 1) << "4 progress updates made " << counts.engine - 1 << " allocations, e.g. "
                              << (sites.empty() ? std::string("-") : sites.front().str(4));
  EXPECT_EQ(by.count[0], 1) << "the counter did not see the probe";
  std::rewind(out);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  for (const char* part : {"\rstep  4/64 | loss 2.4600 | lr 3.0e-04 |",
                           "| non-finite 2 (skipped 0) | aux 0.0123 | imbalance 1.31\x1b[K\n",
                           "\r[#...................]   7% 5/64 | loss 2.4500 | 12.3k tok/s | ETA "}) {
    EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not printed in:\n" << text;
  }
}

Tensor filled(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(t.data<float>(), t.numel(), seed, 7, 0.0f, 1.0f);
  return t;
}

// The op seam on oneDNN, as a MoE step drives it: the three grouped GEMMs of an expert MLP (forward, input
// gradient, weight gradient accumulated) over calls whose groups' row counts change every call, and a dense GEMM of
// one shape. After one warm-up call of each, eight more call no operator new in the kernel layer nor at the seam
// (oneDNN's execute aside: its own, printed), a dense GEMM makes no oneDNN memory object, and a grouped GEMM's
// group at most two (the ones its new row count changes; OneDnnMatmuls::memory_objects), but for a bindings' first. Fails when the memory
// objects' C++ wrappers (a shared_ptr each, their descriptors' dims vectors) or a memory object per call come back;
// the C allocations those objects cost inside oneDNN are printed, not asserted (they are the library's); C allocations
// charged to the kernel layer (a one-thread OpenMP region per call: libgomp mallocs its team) are asserted zero.
TEST(SteadyStateHeapOps, OneDnnGemmsAllocateNothingOfOursPerCall) {
  if (!kernels::cpu::gemm_backend_built(kernels::cpu::GemmBackend::kOneDnn)) {
    GTEST_SKIP() << "onednn is not built into this cleave";
  }
  const std::unique_ptr<ops::DeviceResources> resources = ops::make_device_resources(Device::cpu());
  auto& cpu = dynamic_cast<ops::cpu_detail::CpuResources&>(*resources);
  ops::Context ctx;
  ctx.cpu_blas = ops::CpuBlas::kOneDnn;
  ctx.resources = resources.get();
  constexpr std::int64_t g = 4, rows = 96, k = 24, n = 16, calls = 8;
  const Tensor w = filled({g, n, k}, 30), x = filled({rows, k}, 31), dy = filled({rows, n}, 32);
  const Tensor y = filled({rows, n}, 33), dx = filled({rows, k}, 34), dw = filled({g, n, k}, 35);
  const Tensor dense_w = filled({n, k}, 36);
  std::array<std::array<std::int64_t, g>, calls + 1> groups{};  // call 0 warms up
  for (std::int64_t c = 0; c <= calls; ++c) {
    groups[c] = {5 + 7 * c, c % 3 == 0 ? 0 : 3, 40 - 4 * c, 0};
    groups[c][3] = rows - groups[c][0] - groups[c][1] - groups[c][2];
  }
  ops::GroupedGemmOptions nt, acc;
  nt.trans_b = true;
  acc.beta = 1.0f;
  ops::GemmOptions dense;
  dense.trans_b = true;
  const auto grouped_call = [&](std::int64_t c) {
    ops::grouped_gemm(ctx, x, w, y, groups[c], nt);               // y_g = x_g W_g^T
    ops::grouped_gemm(ctx, dy, w, dx, groups[c]);                 // dx_g = dy_g W_g
    ops::grouped_gemm_weight_grad(ctx, dy, x, dw, groups[c], acc);  // dW_g += dy_g^T x_g
  };
  grouped_call(0);
  ops::gemm(ctx, x, dense_w, y, dense);

  const std::size_t objects = cpu.onednn().memory_objects();
  heap::start();
  for (std::int64_t c = 1; c <= calls; ++c) ops::gemm(ctx, x, dense_w, y, dense);
  const heap::Counts dense_counts = heap::stop();
  const std::optional<heap::Counts> dense_c = heap::c_allocations();
  EXPECT_EQ(cpu.onednn().memory_objects(), objects) << "a dense GEMM of a shape seen before made a memory object";

  std::int64_t groups_run = 0;
  for (std::int64_t c = 1; c <= calls; ++c) {
    for (const std::int64_t r : groups[c]) groups_run += r > 0 ? 3 : 0;
  }
  heap::start();
  for (std::int64_t c = 1; c <= calls; ++c) grouped_call(c);
  const heap::Counts grouped_counts = heap::stop();
  const std::optional<heap::Counts> grouped_c = heap::c_allocations();
  const std::size_t made = cpu.onednn().memory_objects() - objects;

  std::printf("%lld dense GEMMs: %s\n", static_cast<long long>(calls), dense_counts.str().c_str());
  if (dense_c) std::printf("  and C allocations: %s\n", dense_c->str().c_str());
  std::printf("%lld grouped calls (%lld groups run): %s; %zu memory objects made\n", static_cast<long long>(calls) * 3,
              static_cast<long long>(groups_run), grouped_counts.str().c_str(), made);
  if (grouped_c) std::printf("  and C allocations: %s\n", grouped_c->str().c_str());
  for (const heap::Counts& counts : {dense_counts, grouped_counts}) {
    EXPECT_EQ(counts.kernels, 0) << counts.str();
    EXPECT_EQ(counts.engine, 0) << counts.str();
  }
  for (const std::optional<heap::Counts>& counts : {dense_c, grouped_c}) {
    if (counts) {
      EXPECT_EQ(counts->kernels, 0) << "C allocations: " << counts->str();  // e.g. an OpenMP team per call
    }
  }
  EXPECT_GT(made, 0u) << "the groups' row counts changed: the counter of memory objects saw nothing";
  // A bindings' first call makes its A, B and C (3): one bindings per primitive and thread of the team, some of which
  // the warm-up may not have used.
  const std::size_t first_calls = 3 * cpu.onednn().primitives() * static_cast<std::size_t>(omp_get_max_threads());
  EXPECT_LE(made, static_cast<std::size_t>(2 * groups_run) + first_calls)
      << "more than two memory objects per group run";
}

}  // namespace
}  // namespace cleave::testing::steady_state_heap_test
