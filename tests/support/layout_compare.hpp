// Layout comparison for the training tests (tests/e2e): a run's per-step losses and final logical parameters
// (RunRecord, e2e/train_harness.hpp) against a reference run's under a stated Bound, the one-rank reference run
// inside rank 0, and the checkpoint round trips built on the same records (save at step k in one trainer, load in
// a fresh one, continue). The e2e layout tests each state their cases and bounds; the comparing, the printing and
// the directory handling live here once.
//
// Bounds: bit-exact (every loss equal and every parameter element equal bit for bit, memcmp, so -0 vs 0 and NaNs
// count as different), relative (losses per step |a-b|/|b| and parameters element-wise |a-b|/max(|a|,|b|,1e-3)),
// or scaled (losses relative; parameters per tensor max|a-b| / max|b|: the bf16 measure, see max_scaled_param_diff).
//
// Invariants: the helpers report through EXPECT_* only (a failed check never leaves one rank out of the next
// collective), and every helper that takes a communicator is called by every rank of it in the same order.
//
// Users: moe_equivalence, llama_equivalence, mixed_precision, pipeline_equivalence (expect_every_layout_matches_one_rank)
// and checkpoint_test, moe_equivalence's MoeCheckpoint (shared_dir, run_from, expect_resume_exact).
// Adopting it in tests/e2e/ep_equivalence_test.cpp (left alone while the ep work adds cases to it): its reference is
// ep 1 on the same world, not one rank, so it keeps its own loop; its expect_bit_identical (losses finite and equal,
// parameters memcmp-equal) is expect_within(got, want, Bound::bit_exact()), and its shared_dir / run_from are the
// ones below (shared_dir(world, "ep", name) keeps its directory names); EpCheckpoint.SavedAtEpResumesAtEpOneAndAtEp
// then checks each resumed run with expect_continues_bit_identical(rest, whole, kSaveAt).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "e2e/train_harness.hpp"
#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/train/collectives.hpp"

namespace cleave::testing {

// How close a run must come to its reference.
struct Bound {
  enum class Kind { kBitExact, kRelative, kScaled };
  Kind kind = Kind::kBitExact;
  double params = 0;  // kRelative: element-wise relative; kScaled: per-tensor max|diff| / max|value|
  double losses = 0;  // per-step relative
  static Bound bit_exact() { return {}; }
  static Bound relative(double both) { return {Kind::kRelative, both, both}; }
  static Bound scaled(double params, double losses) { return {Kind::kScaled, params, losses}; }
};

// What a comparison measured: the printed figures whatever the bound.
struct Comparison {
  double loss_diff = 0;    // max per-step relative difference
  double param_diff = 0;   // max element-wise relative difference (max_param_rel_diff)
  std::string worst;       // the element of param_diff
  bool scaled = false;     // kScaled: the two below were measured
  double scaled_diff = 0;  // max per-tensor scaled difference (max_scaled_param_diff)
  std::string worst_tensor;
};

// Parameter elements of `got` that differ bit for bit from `want`'s, one failure per tensor with a count.
inline void expect_params_bit_identical(const RunRecord& got, const RunRecord& want) {
  EXPECT_EQ(got.params.size(), want.params.size());
  for (const auto& [name, values] : want.params) {
    const auto it = got.params.find(name);
    if (it == got.params.end()) {
      ADD_FAILURE() << "parameter " << name << " missing in the run";
      continue;
    }
    if (it->second.size() != values.size()) {
      ADD_FAILURE() << name << ": " << it->second.size() << " elements, the reference has " << values.size();
      continue;
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < values.size(); ++i) wrong += std::memcmp(&it->second[i], &values[i], sizeof(float)) != 0;
    EXPECT_EQ(wrong, 0u) << name << ": " << wrong << " of " << values.size() << " elements differ";
  }
}

// Every loss finite and equal to the reference's, and every parameter bit-identical.
inline void expect_bit_identical(const RunRecord& got, const RunRecord& want) {
  EXPECT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size() && i < want.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got.losses[i])) << "step " << i;
    EXPECT_EQ(got.losses[i], want.losses[i]) << "step " << i;
  }
  expect_params_bit_identical(got, want);
}

// Expects `got` to match `want` within `bound`; returns what it measured.
inline Comparison expect_within(const RunRecord& got, const RunRecord& want, const Bound& bound) {
  Comparison c;
  EXPECT_EQ(got.losses.size(), want.losses.size());
  if (got.losses.size() != want.losses.size()) return c;
  c.param_diff = max_param_rel_diff(got, want, &c.worst);
  c.loss_diff = max_loss_rel_diff(got, want);
  switch (bound.kind) {
    case Bound::Kind::kBitExact:
      expect_bit_identical(got, want);
      break;
    case Bound::Kind::kRelative:
      EXPECT_LE(c.loss_diff, bound.losses);
      EXPECT_LE(c.param_diff, bound.params) << "worst " << c.worst;
      break;
    case Bound::Kind::kScaled:
      c.scaled = true;
      c.scaled_diff = max_scaled_param_diff(got, want, &c.worst_tensor);
      EXPECT_LE(c.loss_diff, bound.losses);
      EXPECT_LE(c.scaled_diff, bound.params) << "worst tensor " << c.worst_tensor;
      break;
  }
  return c;
}

// "[ tag ] name  max loss rel diff ..., max param rel diff ... (worst)[, max param diff / tensor scale ... (tensor)]",
// name padded to `width`.
inline void print_comparison(const char* tag, const std::string& name, const Comparison& c, int width = 30) {
  std::printf("[ %s ] %-*s max loss rel diff %.3g, max param rel diff %.3g (%s)", tag, width, name.c_str(),
              c.loss_diff, c.param_diff, c.worst.c_str());
  if (c.scaled) std::printf(", max param diff / tensor scale %.3g (%s)", c.scaled_diff, c.worst_tensor.c_str());
  std::printf("\n");
}

// A layout case: overrides on the test's model and the bound its run must meet.
struct LayoutCase {
  std::string name;
  std::vector<std::string> overrides;
  Bound bound;
};

// The run of `config` on `world` and, on world rank 0, the same model on one rank (single_rank_config, then
// `adjust`) on `self` (rank 0's communicator of its own): both records on rank 0, nullopt on the others.
struct LayoutRuns {
  RunRecord parallel, reference;
};
inline std::optional<LayoutRuns> run_against_one_rank(const config::RunConfig& config, comm::Communicator& world,
                                                      comm::Communicator& self,
                                                      const std::function<void(config::RunConfig&)>& adjust = {}) {
  LayoutRuns runs;
  runs.parallel = train_steps(config, world);
  if (world.rank() != 0) return std::nullopt;
  config::RunConfig one = single_rank_config(config);
  if (adjust) adjust(one);
  runs.reference = train_steps(one, self);
  return runs;
}

// What a layout test checks on rank 0's two runs beyond the bound (a parameter's shape, that it trained). ASSERT_*
// inside ends only the check, and the other ranks' next collective still finds rank 0.
using LayoutCheck = std::function<void(const LayoutCase&, const LayoutRuns&)>;

// The reference lowered its loss: the model trained, so equal runs are not equally idle.
inline void expect_reference_trained(const LayoutCase&, const LayoutRuns& runs) {
  ASSERT_FALSE(runs.reference.losses.empty());
  EXPECT_LT(runs.reference.losses.back(), runs.reference.losses.front());
}

// The layout test: every case `make(overrides)` trained on `world` against one rank (run_against_one_rank, the
// reference adjusted by `adjust`), `check`ed, compared within its bound, and printed as one line tagged `tag`.
// Every rank of `world` calls it.
inline void expect_every_layout_matches_one_rank(
    comm::Communicator& world, const std::vector<LayoutCase>& cases,
    const std::function<config::RunConfig(const std::vector<std::string>&)>& make, const char* tag, int width = 30,
    const std::function<void(config::RunConfig&)>& adjust = {}, const LayoutCheck& check = {}) {
  auto self = world.split(world.rank(), 0, "self");
  for (const LayoutCase& layout : cases) {
    SCOPED_TRACE(layout.name);
    const auto runs = run_against_one_rank(make(layout.overrides), world, *self, adjust);
    if (!runs) continue;
    if (check) check(layout, *runs);
    print_comparison(tag, layout.name, expect_within(runs->parallel, runs->reference, layout.bound), width);
  }
}

// ---- Checkpoints -------------------------------------------------------------------------------------------

// A directory every rank of `world` names the same ("cleave_<prefix>_<name>_<rank 0's pid>" in the temp dir),
// emptied by rank 0 before any rank returns.
inline std::string shared_dir(comm::Communicator& world, const std::string& prefix, const std::string& name) {
  const std::int64_t pid = ::getpid();
  const auto pids = train::all_gather_values<std::int64_t>(world, std::span(&pid, 1));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cleave_" + prefix + "_" + name + "_" + std::to_string(pids[0][0]));
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier()->wait();
  return dir.string();
}

// The directory a save at `step` under `root` writes.
inline std::string step_dir(const std::string& root, std::int64_t step) {
  return root + "/" + checkpoint::step_dir_name(step);
}

// Steps [first, last) in a fresh trainer: after loading `load` (expected to hold step `first`) when given, saving
// under `save_root` at the end when given (a non-empty save, printed on rank 0); the final parameters gathered.
inline RunRecord run_from(const config::RunConfig& config, comm::Communicator& world, std::int64_t first,
                          std::int64_t last, const std::string& load = "", const std::string& save_root = "") {
  train::Trainer trainer(config, world);
  if (!load.empty()) {
    EXPECT_EQ(trainer.load_checkpoint(load), first);
  }
  RunRecord record;
  for (std::int64_t s = first; s < last; ++s) record.losses.push_back(trainer.step(s).loss);
  if (!save_root.empty()) {
    const auto stats = trainer.save_checkpoint(save_root, last);
    EXPECT_GT(stats.bytes, 0);
    if (world.rank() == 0) {
      std::printf("[ save   ] %s: %lld B in %d files, %.1f ms\n", stats.path.c_str(),
                  static_cast<long long>(stats.bytes), stats.files, stats.ms);
    }
  }
  record.params = trainer.gather_parameters();
  return record;
}

// `rest`, a run resumed at step `from`, continues `whole` (the uninterrupted run from step 0) bit for bit: its
// losses are whole's from `from` on and its final parameters whole's.
inline void expect_continues_bit_identical(const RunRecord& rest, const RunRecord& whole, std::int64_t from) {
  EXPECT_EQ(static_cast<std::int64_t>(rest.losses.size()) + from, static_cast<std::int64_t>(whole.losses.size()));
  for (std::size_t i = 0; i < rest.losses.size() && from + static_cast<std::int64_t>(i) < std::ssize(whole.losses); ++i) {
    EXPECT_EQ(rest.losses[i], whole.losses[static_cast<std::size_t>(from) + i]) << "step " << from + i + 1;
  }
  expect_params_bit_identical(rest, whole);
}

// Exact resume: `config` trained config.train.steps steps uninterrupted (whole), and again to `save_at` with a save
// (first) then from the checkpoint in a fresh trainer to the end (rest): every step's loss and the final parameters
// bit for bit. `root` is the save directory (shared_dir), left for the caller to remove.
struct ResumeRuns {
  RunRecord whole, first, rest;
};
inline ResumeRuns expect_resume_exact(const config::RunConfig& config, comm::Communicator& world,
                                      const std::string& root, std::int64_t save_at) {
  const std::int64_t steps = config.train.steps;
  ResumeRuns r;
  r.whole = run_from(config, world, 0, steps);
  r.first = run_from(config, world, 0, save_at, "", root);
  r.rest = run_from(config, world, save_at, steps, step_dir(root, save_at));
  EXPECT_EQ(r.first.losses.size() + r.rest.losses.size(), r.whole.losses.size());
  for (std::size_t i = 0; i < r.first.losses.size() && i < r.whole.losses.size(); ++i) {
    EXPECT_EQ(r.first.losses[i], r.whole.losses[i]) << "step " << i + 1;
  }
  expect_continues_bit_identical(r.rest, r.whole, save_at);
  return r;
}

// Per-step losses of `got` within `rel` (relative) of `want`'s; returns the largest relative difference.
inline double expect_losses_within(const RunRecord& got, const RunRecord& want, double rel) {
  EXPECT_EQ(got.losses.size(), want.losses.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.losses.size(), want.losses.size()); ++i) {
    const double d = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
    EXPECT_LE(d, rel) << "step " << i << ": " << got.losses[i] << " against " << want.losses[i];
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace cleave::testing
