// DualPipeV's overlapped F&B pairs (issue 36 part 6; parallel.moe_a2a_overlap; run under mpiexec at np 4): pp 2 × ep 2
// (ep taken from dp 2), a small MoE model, dualpipev with the pairs run interleaved (pipeline/overlap_pair.hpp:
// while one micro-batch's dispatch or combine all-to-all is in flight the paired micro-batch computes) against the
// same run without the overlap, in deterministic mode: per-step losses and final parameters BIT-IDENTICAL, in fp32,
// bf16, with the sigmoid router and a shared expert, and under full recomputation (the forward rerun inside the
// backward waits at its all-to-alls too); only the order of independent work changes. The overlapped run must have run pairs and handed the rank
// over inside them (StepStats::overlapped_pairs, pair_hand_overs), so a run that silently fell back to one action at
// a time cannot pass. Against one rank (plain 1F1B, ep 1) within the pipeline tests' rounding bound, 5e-6 relative
// (pipeline_equivalence_test.cpp: dp2_pp2_dualpipev); against ep 1 at the same layout bit for bit, as
// ep_equivalence_test.cpp's ep2_pp2_dualpipev is. With ZeRO-2 and ZeRO-3 the overlapped run equals the plain run
// without ZeRO bit for bit; a schedule file saved with its pairs overlapped runs them overlapped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "mpi/mpi_test_env.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "support/layout_compare.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::ep_overlap_test {
namespace {

// tiny_ep_moe with 4 layers, at pp2 under dualpipev, 6 steps.
config::RunConfig overlap_moe(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"parallel.pipeline_model_parallel_size=2", "parallel.schedule=dualpipev"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return tiny_ep_moe("tiny_moe_overlap", 4, 6, all);
}

struct OverlapRun {
  RunRecord record;
  int pairs = 0;       // over the steps, this rank
  int hand_overs = 0;
};

OverlapRun run(const config::RunConfig& config, comm::Communicator& world) {
  train::Trainer trainer(config, world);
  OverlapRun out;
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    const auto stats = trainer.step(s);
    out.record.losses.push_back(stats.loss);
    out.pairs += stats.overlapped_pairs;
    out.hand_overs += stats.pair_hand_overs;
  }
  out.record.params = trainer.gather_parameters();
  return out;
}

TEST(EpOverlap, OverlappedDualPipeVMatchesPlainBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4) GTEST_SKIP() << "runs at 4 ranks (pp 2 x ep 2)";
  auto self = world->split(world->rank(), 0, "self");
  const std::string ep2 = "parallel.expert_model_parallel_size=2", overlap = "parallel.moe_a2a_overlap=true";
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{}, {"device.precision=bf16"},
                                            {"model.router=sigmoid", "model.n_shared_experts=1"},
                                            {"train.recompute=full"}}) {
    const std::string name = extra.empty() ? "fp32" : extra.front();
    SCOPED_TRACE(name);
    std::vector<std::string> plain_keys = extra, overlapped_keys = extra;
    plain_keys.push_back(ep2);
    overlapped_keys.push_back(ep2);
    overlapped_keys.push_back(overlap);
    const OverlapRun overlapped = run(overlap_moe(overlapped_keys), *world);
    const OverlapRun plain = run(overlap_moe(plain_keys), *world);
    const OverlapRun ep1 = run(overlap_moe(extra), *world);
    // 4 micro-batches at pp 2: each rank's steady state holds F&B pairs, and every pair hands over at least
    // once per MoE block (the first side's count exchange).
    EXPECT_GT(overlapped.pairs, 0) << "no F&B pair ran overlapped";
    EXPECT_GE(overlapped.hand_overs, overlapped.pairs) << "pairs ran without handing the rank over";
    EXPECT_EQ(plain.pairs, 0);
    expect_bit_identical(overlapped.record, plain.record);
    expect_bit_identical(overlapped.record, ep1.record);
    if (world->rank() == 0) {
      config::RunConfig one = single_rank_config(overlap_moe(extra));
      const RunRecord single = train_steps(one, *self);
      const double tolerance = extra.empty() || extra.front() != "device.precision=bf16" ? 5e-6 : 1e-2;
      if (tolerance < 1e-2) {
        std::string worst;
        EXPECT_LE(max_loss_rel_diff(overlapped.record, single), tolerance);
        EXPECT_LE(max_param_rel_diff(overlapped.record, single, &worst), tolerance) << "worst " << worst;
      } else {  // bf16: the pipeline layout changes nothing but the f32 sums' order; the scaled measure
        EXPECT_LE(max_loss_rel_diff(overlapped.record, single), tolerance);
      }
      std::printf("[ overlap ] %-22s %d pairs, %d hand-overs on rank 0; losses %.6f -> %.6f, bit-identical to the "
                  "plain run and to ep 1\n",
                  name.c_str(), overlapped.pairs, overlapped.hand_overs, overlapped.record.losses.front(),
                  overlapped.record.losses.back());
    }
  }
}

// ZeRO composes with the overlapped pairs: ZeRO-2 and ZeRO-3 (expert and non-expert shards in their own groups; at
// ZeRO-3 both stages' parameters gathered before a pair starts, engine/train/data_parallel.hpp) with the overlapped
// dualpipev at pp 2 x ep 2 against the PLAIN dualpipev run (no overlap, no ZeRO) bit for bit: ZeRO 1-3 equal plain
// data parallel bit for bit (ep_zero_test.cpp's ep2_pp2_dualpipev_zero2) and the pairs change only the order of
// independent work.
TEST(EpOverlap, OverlappedDualPipeVWithZeroMatchesPlainBitForBit) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4) GTEST_SKIP() << "runs at 4 ranks (pp 2 x ep 2)";
  const std::string ep2 = "parallel.expert_model_parallel_size=2", overlap = "parallel.moe_a2a_overlap=true";
  const OverlapRun plain = run(overlap_moe({ep2}), *world);
  EXPECT_EQ(plain.pairs, 0);
  for (int stage : {2, 3}) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    const OverlapRun overlapped =
        run(overlap_moe({ep2, overlap, "optimizer.zero_stage=" + std::to_string(stage)}), *world);
    EXPECT_GT(overlapped.pairs, 0) << "no F&B pair ran overlapped";
    EXPECT_GE(overlapped.hand_overs, overlapped.pairs) << "pairs ran without handing the rank over";
    expect_bit_identical(overlapped.record, plain.record);
    if (world->rank() == 0) {
      std::printf("[ overlap ] ZeRO-%d overlapped        %d pairs, %d hand-overs on rank 0; losses %.6f -> %.6f, "
                  "bit-identical to plain dualpipev without ZeRO\n",
                  stage, overlapped.pairs, overlapped.hand_overs, overlapped.record.losses.front(),
                  overlapped.record.losses.back());
    }
  }
}

// A schedule saved with its pairs overlapped (schedule_text.hpp's overlap_fb_pairs line) and named as
// parallel.schedule runs the pairs overlapped without the key, bit-identical to the plain dualpipev run.
TEST(EpOverlap, SavedOverlappedScheduleRunsItsPairsOverlapped) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4) GTEST_SKIP() << "runs at 4 ranks (pp 2 x ep 2)";
  const std::string ep2 = "parallel.expert_model_parallel_size=2";
  // pp 2 x dp 2: 8 samples / (1 per micro-batch x 2 replicas) = 4 micro-batches per step.
  const int v = pipeline::default_virtual_stages("dualpipev");
  const pipeline::Schedule compute = pipeline::make_schedule("dualpipev", 2, 4, v);
  const pipeline::Schedule paired = pipeline::overlap_fb_pairs(pipeline::lower_schedule(compute));
  pipeline::Schedule flagged_compute = compute;  // compute actions only: the plan lowers it, then pairs it again
  flagged_compute.overlap_fb_pairs = true;
  const OverlapRun plain = run(overlap_moe({ep2}), *world);
  EXPECT_EQ(plain.pairs, 0);
  for (const pipeline::Schedule* saved : {&paired, static_cast<const pipeline::Schedule*>(&flagged_compute)}) {
    SCOPED_TRACE(saved == &paired ? "lowered file" : "compute-only file");
    const auto path = std::filesystem::temp_directory_path() /
                      ("cleave_ep_overlap_saved_" + std::to_string(world->rank()) + ".sched");
    pipeline::save_schedule(*saved, path.string());
    const OverlapRun from_file = run(overlap_moe({ep2, "parallel.schedule=" + path.string()}), *world);
    std::filesystem::remove(path);
    EXPECT_GT(from_file.pairs, 0) << "the saved schedule's pairs did not run overlapped";
    EXPECT_GE(from_file.hand_overs, from_file.pairs);
    expect_bit_identical(from_file.record, plain.record);
  }
}

TEST(EpOverlap, OverlapWithoutDualPipeVOrEpIsRefusedNamingTheKey) {
  const auto message = [](const std::vector<std::string>& keys) {
    try {
      (void)overlap_moe(keys);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string zb = message({"parallel.schedule=zb_v", "parallel.expert_model_parallel_size=2",
                                  "parallel.moe_a2a_overlap=true"});
  EXPECT_NE(zb.find("parallel.moe_a2a_overlap"), std::string::npos) << zb;
  EXPECT_NE(zb.find("zb_v"), std::string::npos) << zb;
  const std::string no_ep = message({"parallel.moe_a2a_overlap=true"});
  EXPECT_NE(no_ep.find("ep 1"), std::string::npos) << no_ep;
}

}  // namespace
}  // namespace cleave::testing::ep_overlap_test
