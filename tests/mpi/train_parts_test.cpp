// The trainer's parts on their own (engine/train/rank_setup.hpp, rank_model.hpp, step_tail.hpp), under mpiexec
// with 1 and 2 ranks: RankModel lists each parameter once and, at pp 2 with a tied embedding, holds the table's
// two copies with only the embedding's counted; StepTail's numbers (global gradient norm, learning rate) and
// its update are checked by hand from gradients the test writes: the norm over the model-parallel ranks with
// each parameter counted once, the tied copies summed before it, clipping by max_norm / (norm + 1e-6), and a
// plain SGD step p - lr * g. throw_if_any_rank_failed keeps bad input bad input (InputError, exit 64) only when every
// failing rank's failure was bad input. RankSetup clears the run's host-wait counter from its communicators before
// the counter goes.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <typeinfo>

#include "engine/config/config.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/step_tail.hpp"
#include "mpi_test_env.hpp"
#include "support/counting_communicator.hpp"

namespace cleave::testing::train_parts_test {
namespace {

config::RunConfig tiny_gpt(int pp, bool tie, double grad_clip) {
  return config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 40, "d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 8},
    "batch": {"global_batch_size": 4, "micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.25, "momentum": 0.0, "weight_decay": 0.0, "warmup_steps": 0,
                  "schedule": "constant"},
    "data": {"type": "synthetic"}
  })", "tiny_gpt", {"parallel.pipeline_model_parallel_size=" + std::to_string(pp),
                    std::string("model.tie_embeddings=") + (tie ? "true" : "false"),
                    "optimizer.grad_clip=" + std::to_string(grad_clip)});
}

// A gradient value the test can recompute anywhere: depends on the parameter's name and the element.
float grad_value(const std::string& name, std::int64_t i) {
  const auto h = static_cast<std::int64_t>(std::hash<std::string>{}(name) % 7);
  return 0.01f * static_cast<float>((i * 3 + h) % 11 - 5);
}

TEST(RankModel, ListsEachParameterOnceAndHoldsItsStages) {
  auto world = make_world();
  const int pp = world->size();
  train::RankSetup setup(tiny_gpt(pp, /*tie=*/true, 0.0), *world);
  train::RankModel model(setup);
  std::set<const layers::Param*> seen;
  for (const auto& p : model.params()) EXPECT_TRUE(seen.insert(p.get()).second) << p->name << " listed twice";
  for (int stage : setup.plan.local_stages) EXPECT_TRUE(model.holds_stage(stage));
  EXPECT_EQ(model.stages().size(), setup.plan.local_stages.size());
  EXPECT_EQ(model.tied_name(), "embed.token");
  if (pp == 1) {
    // One rank: the head shares the embedding's table, listed once; nothing to sum.
    EXPECT_EQ(model.tied_table(), nullptr);
    EXPECT_EQ(model.tied_group(), nullptr);
    EXPECT_TRUE(model.counts_tied_copy());
  } else {
    // pp 2: the embedding (rank 0) and the head (rank 1) each hold a copy; only the embedding's counts.
    ASSERT_NE(model.tied_table(), nullptr);
    ASSERT_NE(model.tied_group(), nullptr);
    EXPECT_EQ(model.tied_group()->size(), 2);
    EXPECT_EQ(model.counts_tied_copy(), setup.coords.pp_rank == 0);
    EXPECT_EQ(model.counts_in_norm(*model.tied_table(), 0), setup.coords.pp_rank == 0);
  }
  // tp rank > 0 never counts a replicated parameter (a LayerNorm's gain is replicated at any tp).
  for (const auto& p : model.params()) {
    if (p->shard.dim < 0 && p->name != model.tied_name()) {
      EXPECT_FALSE(model.counts_in_norm(*p, 1)) << p->name;
    }
  }
}

// The run's host-wait counter lives in RankSetup and is handed to its communicators (on a GPU, NCCL and the staged
// world note their waits there); the groups are destroyed after the counter, so RankSetup must clear it from them
// first. The world is wrapped so that every group split from it counts a destruction with a counter still set.
TEST(RankSetup, ClearsItsHostWaitCounterFromItsCommunicatorsBeforeItGoes) {
  auto world = make_world();
  CountingCommunicator counting(*world);
  {
    // The control: a communicator destroyed while holding a counter is counted.
    std::unique_ptr<comm::Communicator> part = counting.split(0, counting.rank(), "control");
    ops::HostWaits waits;
    part->count_host_waits(&waits);
  }
  ASSERT_EQ(counting.count(kDestroyedHoldingHostWaits), 1);
  {
    train::RankSetup setup(tiny_gpt(world->size(), /*tie=*/true, 0.0), counting);
    ASSERT_NE(setup.model_parallel, nullptr);
  }
  EXPECT_EQ(counting.count(kDestroyedHoldingHostWaits), 1)
      << "a group outlived the run's host-wait counter still pointing at it";
}

// Writes known gradients, runs the tail's hooks as the executor would, and checks its numbers and the update.
void check_tail(double grad_clip) {
  auto world = make_world();
  const int pp = world->size();
  train::RankSetup setup(tiny_gpt(pp, /*tie=*/true, grad_clip), *world);
  train::RankModel model(setup);
  train::StepTail tail(setup, model);
  tail.begin(3);
  std::map<std::string, std::vector<float>> before;
  for (const auto& p : model.params()) {
    for (std::int64_t i = 0; i < p->grad.numel(); ++i) EXPECT_EQ(p->grad.data<float>()[i], 0.0f) << "not zeroed";
    for (std::int64_t i = 0; i < p->grad.numel(); ++i) p->grad.data<float>()[i] = grad_value(p->name, i);
    before[p->name] = p->value.to_floats();
  }
  // The expected norm: every logical gradient once. A split tied table's copies are summed first, so its
  // gradient is twice the value written on each side.
  double local = 0;
  for (const auto& p : model.params()) {
    if (!model.counts_in_norm(*p, setup.coords.tp_rank)) continue;
    const double factor = model.tied_table() && p->name == model.tied_name() ? 2.0 : 1.0;
    for (std::int64_t i = 0; i < p->grad.numel(); ++i) {
      const double g = factor * grad_value(p->name, i);
      local += g * g;
    }
  }
  Tensor sum = Tensor::empty({1}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
  sum.data<float>()[0] = static_cast<float>(local);
  world->all_reduce(sum, comm::ReduceOp::kSum)->wait();
  const double want_norm = std::sqrt(static_cast<double>(sum.data<float>()[0]));
  ASSERT_GT(want_norm, 0.0);

  for (int stage : setup.plan.local_stages) tail.reduce_grads(stage);
  tail.optimizer_step();
  const train::StepTailResult result = tail.finish();
  EXPECT_NEAR(result.grad_norm, want_norm, 1e-5 * want_norm);
  EXPECT_DOUBLE_EQ(result.lr, 0.25);
  EXPECT_EQ(result.dp_bytes, 0);
  const double scale = grad_clip > 0 && want_norm > grad_clip ? grad_clip / (want_norm + 1e-6) : 1.0;
  std::int64_t checked = 0;
  for (const auto& p : model.params()) {
    const double factor = model.tied_table() && p->name == model.tied_name() ? 2.0 : 1.0;
    const std::vector<float> after = p->value.to_floats();
    for (std::size_t i = 0; i < after.size(); ++i) {
      const double want = before[p->name][i] - 0.25 * scale * factor * grad_value(p->name, static_cast<std::int64_t>(i));
      ASSERT_NEAR(after[i], want, 1e-6 + 1e-6 * std::fabs(want)) << p->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(StepTail, NormAndUpdateFromKnownGradients) { check_tail(/*grad_clip=*/0.0); }

TEST(StepTail, ClipsByTheGlobalNorm) { check_tail(/*grad_clip=*/0.05); }

// The type every rank throws when the ranks' failures are `mine` on this rank.
const std::type_info& thrown_type(comm::Communicator& world, const train::RankFailure& mine) {
  try {
    train::throw_if_any_rank_failed(world, mine);
  } catch (const std::exception& e) {
    return typeid(e);
  }
  return typeid(void);
}

TEST(ThrowIfAnyRankFailed, BadInputStaysBadInputOnlyWhenEveryFailingRankAgrees) {
  auto world = make_world();
  const int rank = world->rank();
  const train::RankFailure input{"checkpoint.dir c already holds checkpoints", train::RankFailureType::kBadInput};
  const train::RankFailure plain{"disk full", train::RankFailureType::kError};
  EXPECT_EQ(thrown_type(*world, {}), typeid(void));
  // Every rank bad input, and rank 0 alone (the others did not fail): InputError everywhere.
  EXPECT_EQ(thrown_type(*world, input), typeid(InputError));
  EXPECT_EQ(thrown_type(*world, rank == 0 ? input : train::RankFailure{}), typeid(InputError));
  // Bad input on rank 0 and a plain error on another rank: a plain Error (a world of 1 has no other rank).
  const std::type_info& mixed = thrown_type(*world, rank == 0 ? input : plain);
  if (world->size() > 1) {
    EXPECT_EQ(mixed, typeid(Error));
  }
  EXPECT_EQ(thrown_type(*world, plain), typeid(Error));
  try {
    train::throw_if_any_rank_failed(*world, input);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds checkpoints"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::testing::train_parts_test
