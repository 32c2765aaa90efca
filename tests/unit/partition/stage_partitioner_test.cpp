// Stage partitioner: each method on hand-made block tables with answers worked out in the comments, the
// min-max dynamic program against brute force over every split of small random tables (with and without
// a memory cap), error messages that name the numbers, and the looped / V-shaped placements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "partition/stage_partitioner.hpp"
#include "support/error_of.hpp"

namespace cleave::partition::stage_partitioner_test {
namespace {

using cleave::testing::error_of;

std::vector<BlockProfile> timed(const std::vector<double>& times) {
  std::vector<BlockProfile> blocks;
  for (double t : times) blocks.push_back({t, 0, 0});
  return blocks;
}

PartitionOptions method(PartitionMethod m) {
  PartitionOptions options;
  options.method = m;
  return options;
}

void expect_covering(const StagePartition& part, int blocks) {
  int next = 0;
  for (const auto& range : part.stages) {
    EXPECT_EQ(range.begin, next);
    EXPECT_GE(range.size(), 1);
    next = range.end;
  }
  EXPECT_EQ(next, blocks);
}

TEST(StagePartitioner, UniformSpreadsTheRemainderOverTheFirstStages) {
  const auto part = partition_stages(timed(std::vector<double>(30, 1.0)), 4, method(PartitionMethod::kUniform));
  EXPECT_EQ(part.blocks_per_stage(), (std::vector<int>{8, 8, 7, 7}));
  expect_covering(part, 30);
  EXPECT_EQ(partition_stages(timed({3, 1, 4, 1}), 4, method(PartitionMethod::kUniform)).blocks_per_stage(),
            (std::vector<int>{1, 1, 1, 1}));
}

TEST(StagePartitioner, ParametersBalancesParameterBytes) {
  // params [100, 1, 1, 1, 100, 1] in 2 stages: [100,1,1 | 1,100,1] gives 102 / 102, every other split > 102.
  std::vector<BlockProfile> blocks;
  for (std::int64_t bytes : {100, 1, 1, 1, 100, 1}) blocks.push_back({1.0, bytes, 0});
  const auto part = partition_stages(blocks, 2, method(PartitionMethod::kParameters));
  EXPECT_EQ(part.blocks_per_stage(), (std::vector<int>{3, 3}));
  EXPECT_EQ(part.stage_param_bytes, (std::vector<std::int64_t>{102, 102}));
}

TEST(StagePartitioner, CostMinimisesTheSlowestStage) {
  // Embedding 1, four blocks of 5, head 3, loss 2 into 3 stages: [1,5 | 5,5 | 5,3,2] = 6, 10, 10.
  const auto part = partition_stages(timed({1, 5, 5, 5, 5, 3, 2}), 3, method(PartitionMethod::kCost));
  EXPECT_EQ(part.blocks_per_stage(), (std::vector<int>{2, 2, 3}));
  EXPECT_EQ(part.stage_time, (std::vector<double>{6, 10, 10}));
  EXPECT_DOUBLE_EQ(part.max_stage_time(), 10);
}

TEST(StagePartitioner, CostRespectsTheMemoryCap) {
  // times [1,1,1,10], activations [5,5,5,1]. Uncapped, [3 | 1] is optimal (3, 10). With a 12-byte cap the
  // first stage may hold at most two blocks: [2 | 2] = (2, 11).
  std::vector<BlockProfile> blocks = {{1, 0, 5}, {1, 0, 5}, {1, 0, 5}, {10, 0, 1}};
  PartitionOptions options = method(PartitionMethod::kCost);
  EXPECT_EQ(partition_stages(blocks, 2, options).blocks_per_stage(), (std::vector<int>{3, 1}));
  options.memory_cap_bytes = 12;
  auto part = partition_stages(blocks, 2, options);
  EXPECT_EQ(part.blocks_per_stage(), (std::vector<int>{2, 2}));
  EXPECT_EQ(part.stage_time, (std::vector<double>{2, 11}));
  EXPECT_EQ(part.stage_memory_bytes, (std::vector<double>{10, 6}));
  // 1F1B keeps 2 micro-batches alive on stage 0 of 2: two blocks there would need 20 bytes, so [1 | 3].
  options.inflight_microbatches = {2, 1};
  part = partition_stages(blocks, 2, options);
  EXPECT_EQ(part.blocks_per_stage(), (std::vector<int>{1, 3}));
  EXPECT_EQ(part.stage_memory_bytes, (std::vector<double>{10, 11}));
}

TEST(StagePartitioner, InfeasibleCapNamesTheCapAndTheBestAchievable) {
  // Any 2-stage split of activations [5,5,5,1] holds at least 10 bytes in one stage ([5,5 | 5,1]).
  std::vector<BlockProfile> blocks = {{1, 0, 5}, {1, 0, 5}, {1, 0, 5}, {10, 0, 1}};
  PartitionOptions options = method(PartitionMethod::kCost);
  options.memory_cap_bytes = 9;
  EXPECT_EQ(error_of([&] { partition_stages(blocks, 2, options); }),
            "partition: no split of 4 blocks into 2 stages keeps every stage under the memory cap of 9 B; the smallest "
            "achievable largest-stage memory is 10 B (raise the cap, use more stages, or use smaller micro-batches)");
  options.method = PartitionMethod::kUniform;
  const std::string uniform = error_of([&] { partition_stages(blocks, 2, options); });
  EXPECT_NE(uniform.find("method 'uniform' puts 10 B in stage 0 (blocks 0..1), over the memory cap of 9 B"),
            std::string::npos)
      << uniform;
}

TEST(StagePartitioner, ManualListsAreCheckedAndUsed) {
  PartitionOptions options = method(PartitionMethod::kManual);
  options.blocks_per_stage = {1, 3, 2};
  const auto part = partition_stages(timed({1, 2, 3, 4, 5, 6}), 3, options);
  EXPECT_EQ(part.stages, (std::vector<BlockRange>{{0, 1}, {1, 4}, {4, 6}}));
  EXPECT_EQ(part.stage_time, (std::vector<double>{1, 9, 11}));

  options.blocks_per_stage = {8, 8, 8, 8};
  EXPECT_EQ(error_of([&] { partition_stages(timed(std::vector<double>(30, 1.0)), 4, options); }),
            "partition: cannot split 30 blocks into 4 stages with blocks_per_stage [8,8,8,8] (sum 32 != 30)");
  options.blocks_per_stage = {4, 0, 2};
  EXPECT_EQ(error_of([&] { partition_stages(timed(std::vector<double>(6, 1.0)), 3, options); }),
            "partition: blocks_per_stage [4,0,2] gives stage 1 0 blocks (every stage needs >= 1)");
  options.blocks_per_stage = {3, 3};
  EXPECT_EQ(error_of([&] { partition_stages(timed(std::vector<double>(6, 1.0)), 3, options); }),
            "partition: blocks_per_stage [3,3] has 2 entries but there are 3 stages");
}

TEST(StagePartitioner, BadInputNamesTheNumbers) {
  EXPECT_EQ(error_of([] { partition_stages(timed({1, 1, 1}), 4, method(PartitionMethod::kCost)); }),
            "partition: cannot split 3 blocks into 4 stages (every stage needs at least one block; use at most 3 "
            "stages)");
  EXPECT_NE(error_of([] { partition_stages(timed({1, -2}), 1, method(PartitionMethod::kCost)); })
                .find("block 1 has time -2"),
            std::string::npos);
  EXPECT_NE(error_of([] { partition_stages(timed({1}), 0, method(PartitionMethod::kCost)); })
                .find("must be at least 1, got 0"),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse_enum<PartitionMethod>("balanced", "parallel.partition.method"); }),
            "parallel.partition.method: \"balanced\" is not one of \"cost\", \"uniform\", \"parameters\", \"manual\"");
  EXPECT_EQ(parse_enum<PartitionMethod>("parameters", "parallel.partition.method"), PartitionMethod::kParameters);
  EXPECT_EQ(enum_name(PartitionMethod::kManual), "manual");
}

// Smallest largest-stage value over every split (compositions of n into s parts), or +inf if the cap
// forbids all of them.
double brute_force(const std::vector<BlockProfile>& blocks, int s, double cap, bool by_params) {
  const int n = static_cast<int>(blocks.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> sizes(s, 1);
  std::function<void(int, int)> rec = [&](int stage, int left) {
    if (stage == s - 1) {
      sizes[stage] = left;
      double worst = 0;
      int begin = 0;
      for (int k = 0; k < s; ++k) {
        double time = 0, params = 0, memory = 0;
        for (int b = begin; b < begin + sizes[k]; ++b) {
          time += blocks[b].time;
          params += static_cast<double>(blocks[b].param_bytes);
          memory += static_cast<double>(blocks[b].param_bytes + blocks[b].activation_bytes);
        }
        if (cap > 0 && memory > cap) return;
        worst = std::max(worst, by_params ? params : time);
        begin += sizes[k];
      }
      best = std::min(best, worst);
      return;
    }
    for (int size = 1; size <= left - (s - 1 - stage); ++size) {
      sizes[stage] = size;
      rec(stage + 1, left - size);
    }
  };
  rec(0, n);
  return best;
}

TEST(StagePartitioner, DynamicProgramMatchesBruteForce) {
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<double> time(0.1, 10.0);
  std::uniform_int_distribution<std::int64_t> bytes(1, 1000);
  int capped_cases = 0, infeasible_cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 10;
    const int s = 1 + static_cast<int>(rng() % n);
    std::vector<BlockProfile> blocks;
    for (int b = 0; b < n; ++b) blocks.push_back({time(rng), bytes(rng), bytes(rng)});
    // Time.
    const auto part = partition_stages(blocks, s, method(PartitionMethod::kCost));
    expect_covering(part, n);
    EXPECT_NEAR(part.max_stage_time(), brute_force(blocks, s, 0, false), 1e-9) << "trial " << trial;
    // Parameters.
    const auto by_params = partition_stages(blocks, s, method(PartitionMethod::kParameters));
    const auto worst_params = *std::max_element(by_params.stage_param_bytes.begin(), by_params.stage_param_bytes.end());
    EXPECT_EQ(static_cast<double>(worst_params), brute_force(blocks, s, 0, true)) << "trial " << trial;
    // Time under a random cap between "everything fits" and "nothing fits".
    PartitionOptions options = method(PartitionMethod::kCost);
    options.memory_cap_bytes = 1 + static_cast<std::int64_t>(rng() % 4000);
    const double expected = brute_force(blocks, s, static_cast<double>(options.memory_cap_bytes), false);
    if (std::isinf(expected)) {
      ++infeasible_cases;
      EXPECT_NE(error_of([&] { partition_stages(blocks, s, options); }).find("no split of"), std::string::npos);
    } else {
      ++capped_cases;
      const auto capped = partition_stages(blocks, s, options);
      EXPECT_NEAR(capped.max_stage_time(), expected, 1e-9) << "trial " << trial;
      for (double memory : capped.stage_memory_bytes) EXPECT_LE(memory, options.memory_cap_bytes);
    }
  }
  EXPECT_GT(capped_cases, 50);  // both branches were exercised
  EXPECT_GT(infeasible_cases, 20);
}

TEST(StagePlacement, LoopedAndVShaped) {
  EXPECT_EQ(place_stages(4, 2, StagePlacement::kLooped), (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(place_stages(4, 2, StagePlacement::kVShape), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(place_stages(2, 3, StagePlacement::kVShape), (std::vector<int>{0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(place_stages(3, 1, StagePlacement::kVShape), (std::vector<int>{0, 1, 2}));
  // ZB-V: rank r holds stages r and 2p − 1 − r.
  const auto by_rank = stages_by_rank(place_stages(4, 2, StagePlacement::kVShape), 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(by_rank[r], (std::vector<int>{r, 7 - r}));
  EXPECT_NE(error_of([] { place_stages(0, 2, StagePlacement::kLooped); }).find("pp_size must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { stages_by_rank({0, 2}, 2); }).find("stage 1 is placed on rank 2, expected 0..1"),
            std::string::npos);
}

}  // namespace
}  // namespace cleave::partition::stage_partitioner_test
