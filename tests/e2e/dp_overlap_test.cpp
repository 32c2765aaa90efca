// Overlap of the data-parallel reduction with the backward (part of e2e_data_parallel_test, see
// dp_equivalence_test.cpp).
//
// What it asserts: with several buckets, buckets start from the grad-final callbacks before the last block of
// the backward reports; the ready order DataParallel derives matches the order the callbacks fire (block by
// block); and the bucketed result equals a naive per-parameter all-reduce bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dp_test_support.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/data_parallel.hpp"
#include "layers/models/builder.hpp"
#include "mpi/mpi_test_env.hpp"
#include "pipeline/stage_module.hpp"
#include "support/tiny_models.hpp"
#include "train_harness.hpp"

namespace cleave::testing::dp_overlap_test {
namespace {

TEST(DataParallelOverlap, BucketsStartDuringBackwardInCallbackOrder) {
  auto world = make_world(/*deterministic=*/true);
  auto config = tiny_gpt({"batch.micro_batch_size=2", kTinyBuckets});
  config.resolve(world->size());
  const run_plan::Plan plan = run_plan::make_plan(config, 1, 0);
  ASSERT_EQ(plan.num_stages(), 1);
  const std::size_t num_blocks = plan.spec.blocks.size();
  layers::BuildOptions build{cpu_allocator()};
  build.seed = config.train.seed;

  // Two identical copies of the whole model: one reduced by DataParallel, one by hand.
  auto blocks = layers::build_blocks(plan.spec, 0, num_blocks, build);
  // The order the callbacks fire: blocks in reverse, each block's params in its own order.
  std::vector<std::pair<std::string, std::size_t>> expected_reports;  // (name, block)
  for (std::size_t b = num_blocks; b-- > 0;) {
    for (const auto& p : blocks[b]->params()) expected_reports.emplace_back(p->name, b);
  }
  pipeline::StageModule stage(std::move(blocks), true, true);
  pipeline::StageModule reference(layers::build_blocks(plan.spec, 0, num_blocks, build), true, true);

  train::DataParallelOptions options;
  options.bucket_mib = config.parallel.dp_bucket_mb;
  train::DataParallel dp(plan, 0, {{0, &stage}}, stage.params(), *world, nullptr, options);
  ASSERT_GT(dp.num_buckets(), 4);

  std::vector<std::string> reported;
  reference.set_grad_final_callback([&reported](const layers::Param& p) { reported.push_back(p.name); });

  const std::int64_t micro = 2;
  const std::int64_t seq = plan.spec.gpt.seq_len;
  layers::Context ctx;
  const Tensor targets =
      random_tokens(micro, seq, plan.spec.gpt.vocab_size, 1000u + static_cast<unsigned>(world->rank()));
  const Tensor ids = random_tokens(micro, seq, plan.spec.gpt.vocab_size, 2000u + static_cast<unsigned>(world->rank()));
  Tensor dy = Tensor::empty({1}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  dy.data<float>()[0] = 1.0f;

  train::DataParallelStepReport report;
  for (int step = 0; step < 2; ++step) {  // twice: the second step starts from zeroed bucket buffers
    dp.begin_step();
    stage.forward(0, ids, targets, ctx);
    stage.backward(0, dy, ctx, /*final=*/true);
    report = dp.end_step();
  }
  for (const auto& p : reference.params()) p->grad.zero_();
  reference.forward(0, ids, targets, ctx);
  reference.backward(0, dy, ctx, /*final=*/true);

  // Overlap: every bucket started from a callback, most of them before the last block reported.
  EXPECT_EQ(report.buckets, dp.num_buckets());
  EXPECT_EQ(report.launched_before_finish, report.buckets);
  EXPECT_GE(report.launched_before_last_report, report.buckets / 2);
  EXPECT_LT(report.launched_before_last_report, report.buckets);  // the embedding's bucket waits for it

  // The derived ready order is the callbacks' order, block by block (a shared table at its last report).
  ASSERT_EQ(reported.size(), expected_reports.size());
  std::map<std::string, std::size_t> final_block;
  for (std::size_t i = 0; i < reported.size(); ++i) {
    EXPECT_EQ(reported[i], expected_reports[i].first) << "callback order changed at report " << i;
    final_block[reported[i]] = expected_reports[i].second;
  }
  std::vector<std::size_t> derived_blocks, callback_blocks;
  for (const auto& name : dp.ready_order()) derived_blocks.push_back(final_block.at(name));
  std::map<std::string, std::size_t> last_index;
  for (std::size_t i = 0; i < reported.size(); ++i) last_index[reported[i]] = i;
  std::vector<std::pair<std::size_t, std::string>> finals;
  for (const auto& [name, index] : last_index) finals.emplace_back(index, name);
  std::sort(finals.begin(), finals.end());
  for (const auto& [index, name] : finals) callback_blocks.push_back(final_block.at(name));
  EXPECT_EQ(derived_blocks, callback_blocks);

  // The bucketed mean equals a per-parameter rank-ordered all-reduce and 1/dp, bit for bit.
  const float scale = 1.0f / static_cast<float>(world->size());
  double largest = 0;
  const auto& mine = stage.params();
  const auto& theirs = reference.params();
  ASSERT_EQ(mine.size(), theirs.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    world->all_reduce(theirs[i]->grad, comm::ReduceOp::kSum)->wait();
    const float* want = theirs[i]->grad.data<float>();
    const float* got = mine[i]->grad.data<float>();
    std::int64_t wrong = 0;
    for (std::int64_t k = 0; k < mine[i]->grad.numel(); ++k) {
      const float w = want[k] * scale;
      wrong += std::memcmp(&w, &got[k], sizeof w) != 0 ? 1 : 0;
      largest = std::max(largest, static_cast<double>(std::abs(got[k])));
    }
    EXPECT_EQ(wrong, 0) << mine[i]->name;
  }
  EXPECT_GT(largest, 0.0);
  if (world->rank() == 0) {
    std::printf("[ overlap ] %d buckets: %d started by callbacks, %d before the last block reported\n", report.buckets,
                report.launched_before_finish, report.launched_before_last_report);
  }
}

}  // namespace
}  // namespace cleave::testing::dp_overlap_test
