// The steady-state rule (docs/ops.md, "No heap allocation in the CPU kernel layer", "Multi-rank") under mpiexec -n 2:
// after three warm-up steps, three training steps of small models at dp2 (ZeRO 0 and 3), pp2 (1F1B), cp2 (ring and
// all_to_all) and ep2 (a small MoE) make no heap allocation (global operator new, heap_counter.hpp) in the areas held
// to zero: the communicator (its Works, request labels and details, argument checks, batch_p2p and all_to_all_v
// lists), the optimizer side (the gradient norm, clipping and step), the data-parallel side (reduction, ZeRO shards
// and gathers) and context parallelism's layout. Each
// allocation charged to the engine is charged further to the area of the innermost named function of ours on its
// stack (EngineAreas below: a substring of its mangled name, first match wins); the other areas (cp exchanges, ep
// dispatch, router metrics, a Tensor's storage, the allocator's cache, layers, the pipeline executor, the
// trainer) are printed, not asserted. The engine's total must be non-zero, so a counter that sees nothing cannot
// pass; with the Work pool bypassed (one allocation per op put back) the comm area fails at every layout.
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "heap_counter.hpp"
#include "mpi/mpi_test_env.hpp"
#include "train_harness.hpp"

namespace cleave::testing {
namespace {

// An area: the parts of a mangled name that place a function in it; held says whether the test asserts zero.
struct Area {
  const char* name;
  std::vector<const char*> parts;
  bool held;
};

// Areas in match order (the first area with a part in the name wins); the last, empty, takes the rest.
const std::vector<Area>& areas() {
  static const std::vector<Area> kAreas = {
      {"router metrics", {"RouterMetrics", "router_metrics"}, false},
      {"comm (works, labels, checks, all_to_all_v)", {"6cleave4comm"}, true},
      {"optimizer (norm, clipping, step)", {"6cleave5optim"}, true},
      {"dp / ZeRO (reduction, shards, gathers)",
       {"DataParallel", "data_parallel", "ParameterGather", "parameter_gather", "ParameterShards", "parameter_shards"},
       true},
      {"cp layout", {"CpLayout", "CpSegments", "cp_layout"}, true},
      {"cp exchanges (ring, all_to_all)", {"ring_attention", "RingAttention", "ulysses", "Ulysses", "seq_to_heads",
                                           "heads_to_seq"}, false},
      {"ep (dispatch, combine)", {"ExpertDispatch", "expert_dispatch", "dispatch_rows", "combine_rows",
                                  "plan_dispatch", "BalanceExchange", "balance_exchange"}, false},
      {"tensor storage, allocator", {"6cleave6Tensor", "6cleave9Allocator", "CachingAllocator", "Storage"}, false},
      {"pipeline", {"6cleave8pipeline"}, false},
      {"layers", {"6cleave6layers"}, false},
      {"elsewhere (trainer, ops, ...)", {}, false},
  };
  return kAreas;
}

bool ours(const char* name) {
  for (const char* prefix : {"_ZN6cleave", "_ZNK6cleave", "_ZZN6cleave", "_ZZNK6cleave"}) {
    if (name != nullptr && std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

// The engine's allocations by area. Called from operator new: no allocation here (dladdr, fixed tables).
class EngineAreas {
 public:
  static constexpr int kMaxAreas = 16;
  static constexpr std::size_t kSlots = 1 << 14;
  static constexpr std::int8_t kNotOurs = -1;

  static void observe(void* self, void* const* frames, int n) { static_cast<EngineAreas*>(self)->add(frames, n); }

  // trace: print the call stacks of the first `trace` allocations charged to a held area (stderr).
  void reset(std::int64_t trace) {
    for (auto& c : counts_) c.store(0);
    trace_left_.store(trace);
  }
  std::int64_t count(std::size_t area) const { return counts_[area].load(); }

 private:
  void add(void* const* frames, int n) {
    for (int i = 0; i < n; ++i) {
      const std::int8_t area = area_of(frames[i]);
      if (area == kNotOurs) continue;
      counts_[static_cast<std::size_t>(area)].fetch_add(1);
      if (areas()[static_cast<std::size_t>(area)].held && trace_left_.fetch_sub(1) > 0) {
        const char* line = "--- allocation in a held area\n";
        if (write(2, line, std::strlen(line)) < 0) {
          // nothing to do: tracing is best effort
        }
        backtrace_symbols_fd(frames, n, 2);
      }
      return;
    }
    counts_[areas().size() - 1].fetch_add(1);
  }

  // Area of the function holding `address`, kNotOurs for a function not of ours (or unnamed); remembered per address.
  std::int8_t area_of(void* address) {
    std::size_t slot = (reinterpret_cast<std::uintptr_t>(address) >> 2) % kSlots;
    for (std::size_t probe = 0; probe < 32; ++probe, slot = (slot + 1) % kSlots) {
      if (addresses_[slot] == address) return areas_[slot];
      if (addresses_[slot] == nullptr) break;
    }
    Dl_info info{};
    const char* name = dladdr(address, &info) != 0 ? info.dli_sname : nullptr;
    std::int8_t found = kNotOurs;
    if (ours(name)) {
      found = static_cast<std::int8_t>(areas().size() - 1);
      for (std::size_t a = 0; a + 1 < areas().size() && found == static_cast<std::int8_t>(areas().size() - 1); ++a) {
        for (const char* part : areas()[a].parts) {
          if (std::strstr(name, part) != nullptr) {
            found = static_cast<std::int8_t>(a);
            break;
          }
        }
      }
    }
    if (addresses_[slot] == nullptr) {
      addresses_[slot] = address;
      areas_[slot] = found;
    }
    return found;
  }

  std::array<std::atomic<std::int64_t>, kMaxAreas> counts_{};
  std::atomic<std::int64_t> trace_left_{0};
  std::array<void*, kSlots> addresses_{};
  std::array<std::int8_t, kSlots> areas_{};
};

config::RunConfig small_model(const std::string& model, std::vector<std::string> overrides) {
  return config::parse_config(R"({"model": )" + model + R"(,
    "batch": {"global_batch_size": 16, "micro_batch_size": 4},
    "optimizer": {"type": "adamw", "lr": 0.003, "warmup_steps": 2, "grad_clip": 1.0},
    "train": {"seed": 3, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", "small_model", overrides);
}

const char* kGpt = R"({"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 32})";
const char* kMoe = R"({"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                       "seq_len": 32, "ffn_hidden_size": 24, "n_experts": 4, "top_k": 2})";

struct Case {
  const char* name;
  const char* model;
  std::vector<std::string> overrides;
};

std::vector<Case> cases() {
  const std::string cp2 = "parallel.context_parallel_size=2";
  return {
      {"dp2 zero0", kGpt, {}},
      {"dp2 zero3", kGpt, {"optimizer.zero_stage=3"}},
      {"pp2 1f1b", kGpt, {"parallel.pipeline_model_parallel_size=2", "parallel.schedule=1f1b"}},
      {"cp2 ring", kGpt, {cp2, "parallel.context_parallel_comm=ring"}},
      {"cp2 all_to_all", kGpt, {cp2, "parallel.context_parallel_comm=all_to_all"}},
      {"ep2 moe", kMoe, {"parallel.expert_model_parallel_size=2"}},
  };
}

TEST(SteadyStateHeapMpi, TrainingStepsAllocateNothingInTheHeldAreas) {
  auto world = make_world();
  ASSERT_EQ(world->size(), 2) << "run under mpiexec -n 2";
  const char* trace_env = std::getenv("CLEAVE_HEAP_AREA_TRACE");
  const std::int64_t trace = trace_env != nullptr ? std::atoll(trace_env) : 0;
  EngineAreas engine_areas;
  heap::observe_engine(&EngineAreas::observe, &engine_areas);
  for (const Case& c : cases()) {
    train::Trainer trainer(small_model(c.model, c.overrides), *world);
    for (int s = 0; s < 3; ++s) trainer.step(s);
    engine_areas.reset(trace);
    heap::start();
    for (int s = 3; s < 6; ++s) trainer.step(s);
    const heap::Counts counts = heap::stop();
    std::string report = std::string(c.name) + ", rank " + std::to_string(world->rank()) + ": 3 steps made " +
                         counts.str() + "; the engine's by area ([held] asserted zero):";
    for (std::size_t a = 0; a < areas().size(); ++a) {
      report += std::string(a == 0 ? " " : ", ") + (areas()[a].held ? "[held] " : "") + areas()[a].name + " " +
                std::to_string(engine_areas.count(a));
    }
    std::printf("%s\n", report.c_str());
    EXPECT_GT(counts.engine, 0) << c.name << ": the engine allocates (docs/ops.md): 0 says the counter saw nothing";
    for (std::size_t a = 0; a < areas().size(); ++a) {
      if (areas()[a].held) {
        EXPECT_EQ(engine_areas.count(a), 0) << c.name << ", rank " << world->rank() << ": " << areas()[a].name
                                            << " (CLEAVE_HEAP_AREA_TRACE=N prints the first N call stacks)";
      }
    }
  }
  heap::observe_engine(nullptr, nullptr);
}

}  // namespace
}  // namespace cleave::testing
