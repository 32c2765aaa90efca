// ZeRO-2 and 3 watched from inside one stage driven by hand, against a twin stage reduced by plain data parallel
// (part of e2e_data_parallel_test, see dp_equivalence_test.cpp).
//
// What it asserts:
//  - ZeRO-2: at the optimizer step each rank holds only its shard of the gradients, equal bit for bit to plain
//    data parallel's reduced gradient; the shards of all ranks cover every element once; no Param::grad of a
//    reduced bucket stays allocated (ZeroTwo).
//  - ZeRO-3: each block's gathered parameters equal an unsharded copy's bit for bit, at most two adjacent
//    blocks' units are held at once, and between steps no Param holds a value (ZeroThree).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
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

namespace cleave::testing::dp_zero_internals_test {
namespace {

// Two copies of the tiny GPT's one stage built from the same seed: one for plain (or ZeRO-1) data parallelism
// as the reference, one for the stage under test.
struct TwinStages {
  run_plan::Plan plan;
  std::size_t num_blocks = 0;
  std::unique_ptr<pipeline::StageModule> reference;
  std::unique_ptr<pipeline::StageModule> tested;
};

TwinStages twin_stages(const config::RunConfig& config) {  // config resolved
  TwinStages twins{run_plan::make_plan(config, 1, 0), 0, nullptr, nullptr};
  twins.num_blocks = twins.plan.spec.blocks.size();
  layers::BuildOptions build{cpu_allocator()};
  build.seed = config.train.seed;
  for (auto* stage : {&twins.reference, &twins.tested}) {
    *stage = std::make_unique<pipeline::StageModule>(layers::build_blocks(twins.plan.spec, 0, twins.num_blocks, build),
                                                     true, true);
  }
  return twins;
}

// ZeRO-2 at the optimizer step: every shard the sharded optimizer sees holds, element for element, the
// reduced gradient plain data parallel computes from the same backward (bit for bit), the shards of all
// ranks cover every gradient element once, no Param::grad stays allocated, and after the update the
// optimizer holds no gradient.
TEST(ZeroTwo, ShardsHoldTheReducedGradientAndNothingElse) {
  auto world = make_world(/*deterministic=*/true);
  auto config = tiny_gpt({"batch.micro_batch_size=2", kTinyBuckets, "optimizer.type=adamw"});
  config.resolve(world->size());
  TwinStages twins = twin_stages(config);
  const run_plan::Plan& plan = twins.plan;
  pipeline::StageModule& plain_stage = *twins.reference;
  pipeline::StageModule& sharded_stage = *twins.tested;
  train::DataParallelOptions options;
  options.bucket_mib = config.parallel.dp_bucket_mb;
  options.optimizer = config.optimizer;
  train::DataParallel plain(plan, 0, {{0, &plain_stage}}, plain_stage.params(), *world, nullptr, options);
  options.zero_stage = 2;
  train::DataParallel sharded(plan, 0, {{0, &sharded_stage}}, sharded_stage.params(), *world, nullptr, options);

  const std::int64_t micro = 2;
  layers::Context ctx;
  const Tensor targets = random_tokens(micro, plan.spec.gpt.seq_len, plan.spec.gpt.vocab_size, 300u + world->rank());
  const Tensor ids = random_tokens(micro, plan.spec.gpt.seq_len, plan.spec.gpt.vocab_size, 400u + world->rank());
  Tensor dy = Tensor::empty({1}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  dy.data<float>()[0] = 1.0f;
  for (auto* dp : {&plain, &sharded}) dp->begin_step();
  for (auto* stage : {&plain_stage, &sharded_stage}) {
    stage->forward(0, ids, targets, ctx);
    stage->backward(0, dy, ctx, /*final=*/true);
  }
  plain.end_step();
  sharded.end_step();

  std::map<std::string, const layers::Param*> reference;
  for (const auto& p : plain_stage.params()) reference[p->name] = p.get();
  std::int64_t total = 0;
  for (const auto& p : sharded_stage.params()) {
    EXPECT_FALSE(p->grad.defined()) << p->name << " keeps a gradient past its bucket";
    total += p->value.numel();
  }
  std::int64_t covered = 0, wrong = 0;
  double largest = 0;
  for (const optim::FlatShard& shard : sharded.sharded_optimizer()->shards()) {
    ASSERT_TRUE(shard.grad.defined());
    const float* got = shard.grad.data<float>();
    for (const optim::ShardSegment& segment : shard.segments) {
      const float* want = reference.at(segment.param->name)->grad.data<float>() + segment.param_offset;
      for (std::int64_t k = 0; k < segment.numel; ++k) {
        wrong += std::memcmp(&want[k], &got[segment.begin + k], sizeof(float)) != 0 ? 1 : 0;
        largest = std::max(largest, static_cast<double>(std::abs(got[segment.begin + k])));
      }
      covered += segment.numel;
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(largest, 0.0);
  Tensor sum = Tensor::empty({1}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  sum.data<std::int64_t>()[0] = covered;
  world->all_reduce(sum, comm::ReduceOp::kSum)->wait();
  EXPECT_EQ(sum.data<std::int64_t>()[0], total);

  sharded.sharded_step(1e-3);
  for (const optim::FlatShard& shard : sharded.sharded_optimizer()->shards()) EXPECT_FALSE(shard.grad.defined());
  if (world->rank() == 0) {
    std::printf("[ zero-2 ] %lld of %lld gradient elements on rank 0, equal bit for bit to plain dp's mean\n",
                static_cast<long long>(covered), static_cast<long long>(total));
  }
}

// Watches a ZeRO-3 stage from inside: after each acquire the running block's parameters hold exactly the
// values of an unsharded copy of the model, and at most the running block's and the next block's units are
// gathered (a tied head also holds the embedding's); between steps no Param has a value.
class ResidencySpy final : public pipeline::ParameterResidency {
 public:
  ResidencySpy(pipeline::ParameterResidency& inner, const pipeline::StageModule& stage,
               const pipeline::StageModule& reference)
      : inner_(inner), stage_(stage), reference_(reference) {}
  void acquire(int block, int next) override {
    inner_.acquire(block, next);
    ++acquires;
    prefetch_asked += next >= 0 ? 1 : 0;
    std::map<std::string, const layers::Param*> want;
    for (const auto& p : reference_.block_params(static_cast<std::size_t>(block))) want[p->name] = p.get();
    for (const auto& p : stage_.block_params(static_cast<std::size_t>(block))) {
      const Tensor& got = p->compute();
      if (!got.defined() || got.numel() != want.at(p->name)->value.numel() ||
          std::memcmp(got.raw_data(), want.at(p->name)->value.raw_data(), got.nbytes()) != 0) {
        wrong.push_back(p->name);
      }
    }
    std::int64_t held = 0;
    for (const auto& p : stage_.params()) held += p->compute().defined() ? p->compute().numel() : 0;
    most_held = std::max(most_held, held);
  }
  void release(int block) override { inner_.release(block); }

  int acquires = 0;
  int prefetch_asked = 0;
  std::vector<std::string> wrong;
  std::int64_t most_held = 0;

 private:
  pipeline::ParameterResidency& inner_;
  const pipeline::StageModule& stage_;
  const pipeline::StageModule& reference_;
};

TEST(ZeroThree, BlocksHoldTheirParametersOnlyWhileTheyRun) {
  auto world = make_world(/*deterministic=*/true);
  auto config = tiny_gpt({"batch.micro_batch_size=2", "optimizer.type=adamw", "optimizer.lr=0.01"});
  config.resolve(world->size());
  TwinStages twins = twin_stages(config);
  const run_plan::Plan& plan = twins.plan;
  const std::size_t num_blocks = twins.num_blocks;
  pipeline::StageModule& plain_stage = *twins.reference;
  pipeline::StageModule& sharded_stage = *twins.tested;
  train::DataParallelOptions options;
  options.optimizer = config.optimizer;
  options.zero_stage = 1;  // plain's values stay whole (flat views), updated like ZeRO-3's shards
  train::DataParallel plain(plan, 0, {{0, &plain_stage}}, plain_stage.params(), *world, nullptr, options);
  options.zero_stage = 3;
  train::DataParallel sharded(plan, 0, {{0, &sharded_stage}}, sharded_stage.params(), *world, nullptr, options);
  ASSERT_NE(sharded.parameter_shards(), nullptr);
  ASSERT_NE(sharded_stage.parameter_residency(), nullptr);
  ResidencySpy spy(*sharded_stage.parameter_residency(), sharded_stage, plain_stage);
  sharded_stage.set_parameter_residency(&spy);

  std::int64_t total = 0, largest_two = 0;
  for (const auto& p : plain_stage.params()) total += p->value.numel();
  for (std::size_t i = 0; i + 1 < num_blocks; ++i) {
    std::int64_t two = 0;
    for (std::size_t b : {i, i + 1}) {
      for (const auto& p : plain_stage.block_params(b)) two += p->value.numel();
    }
    largest_two = std::max(largest_two, two);
  }
  const auto no_values = [&sharded_stage] {
    for (const auto& p : sharded_stage.params()) {
      if (p->value.defined() || p->working.defined()) return false;
    }
    return true;
  };
  EXPECT_TRUE(no_values()) << "a Param kept its value after sharding";

  const std::int64_t micro = 2;
  layers::Context ctx;
  Tensor dy = Tensor::empty({1}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  dy.data<float>()[0] = 1.0f;
  for (int step = 0; step < 3; ++step) {
    const Tensor targets =
        random_tokens(micro, plan.spec.gpt.seq_len, plan.spec.gpt.vocab_size, 300u + 7 * step + world->rank());
    const Tensor ids = random_tokens(micro, plan.spec.gpt.seq_len, plan.spec.gpt.vocab_size, 400u + 7 * step + world->rank());
    for (auto* dp : {&plain, &sharded}) dp->begin_step();
    const std::int64_t gathers_before = sharded.parameter_shards()->gathers();
    for (auto* stage : {&plain_stage, &sharded_stage}) {
      stage->forward(0, ids, targets, ctx);
      stage->backward_input(0, dy, ctx);  // the split backward: W afterwards, without gathering
      stage->backward_weight(0, ctx, /*final=*/true);
    }
    // Every block with parameters gathers once in the forward and once in the input-gradient pass.
    std::int64_t with_params = 0;
    for (std::size_t b = 0; b < num_blocks; ++b) with_params += plain_stage.block_params(b).empty() ? 0 : 1;
    EXPECT_LE(sharded.parameter_shards()->gathers() - gathers_before, 2 * with_params + 2);  // + the tied table
    EXPECT_GE(sharded.parameter_shards()->gathers() - gathers_before, 2 * with_params - 2);
    EXPECT_FALSE(sharded.parameter_shards()->any_gathered());
    EXPECT_TRUE(no_values()) << "step " << step;
    plain.end_step();
    sharded.end_step();
    plain.sharded_step(1e-2);
    sharded.sharded_step(1e-2);
    EXPECT_TRUE(no_values()) << "step " << step;
  }
  EXPECT_TRUE(spy.wrong.empty()) << spy.wrong.size() << " parameters differ from the unsharded copy's, first "
                                 << (spy.wrong.empty() ? "" : spy.wrong.front());
  EXPECT_EQ(spy.acquires, 3 * 2 * static_cast<int>(num_blocks));
  EXPECT_GT(sharded.parameter_shards()->prefetches(), 0);
  // Two adjacent blocks (the running one and its prefetch), and a tied head's embedding table besides.
  EXPECT_LE(spy.most_held, largest_two + plan.spec.gpt.vocab_size * plan.spec.gpt.d_model);
  EXPECT_LT(spy.most_held, total / 2);
  if (world->rank() == 0) {
    std::printf("[ zero-3 ] %d block passes matched the unsharded model bit for bit; at most %lld of %lld parameter "
                "elements held in full at once; %lld gathers, %lld prefetched\n",
                spy.acquires, static_cast<long long>(spy.most_held), static_cast<long long>(total),
                static_cast<long long>(sharded.parameter_shards()->gathers()),
                static_cast<long long>(sharded.parameter_shards()->prefetches()));
  }
  sharded_stage.set_parameter_residency(nullptr);  // before the spy goes (the store's destructor resets it too)
}

}  // namespace
}  // namespace cleave::testing::dp_zero_internals_test
