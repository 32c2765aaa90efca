// Checkpoints under mpiexec (deterministic mode, AdamW with clipping, tied embeddings):
//  - Resume is exact: training n steps uninterrupted and training k steps, saving, building a fresh trainer,
//    loading and training to n give bit-identical per-step losses and final parameters, on one rank and on
//    multi-rank layouts (dp2 x pp2, tp2 x pp2, dp2 x pp2 with ZeRO-1, dp4 with ZeRO-1 at 4 ranks; pp2 and
//    dp2 with ZeRO-1 and pp2 in bf16 at 2 ranks; dp2 x pp2 x tp2 with ZeRO-1 at 8 ranks), for the digits
//    MLP (SGD with momentum) and CNN (AdamW) on one rank and at dp2 too.
//  - Resharding: a checkpoint saved under one layout (tp2 x pp2 at 4 ranks, dp2 x pp2 x tp2 with ZeRO-1 at 8)
//    loads under others and continues with the losses one rank computes from the same checkpoint, within
//    1e-5 relative (the printed lines show where they are bit-equal); a one-rank checkpoint loads under the
//    multi-rank layout the same way. At 8 ranks the checkpoint also loads at tp2 on 2 ranks (four pairs).
//  - Bad checkpoints (a different model, a missing shard file, a truncated file, a flipped byte) fail
//    before any step with a message naming the file, the tensor and the numbers, on every rank, and leave
//    the trainer's parameters untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "mpi/mpi_test_env.hpp"
#include "support/layout_compare.hpp"
#include "train_harness.hpp"

namespace cleave::testing::checkpoint_test {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSteps = 6;
constexpr std::int64_t kSaveAt = 3;

config::RunConfig tiny_gpt(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"train.steps=" + std::to_string(kSteps)};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 96, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 1},
    "optimizer": {"type": "adamw", "lr": 0.003, "weight_decay": 0.1, "grad_clip": 0.5, "warmup_steps": 2},
    "train": {"seed": 11, "deterministic": true, "eval_batches": 0},
    "data": {"type": "synthetic"}
  })", "tiny_gpt", all);
}

// Exact resume (support/layout_compare.hpp's expect_resume_exact: every step's loss and the final parameters bit
// for bit) of a run that trains, whose saved step differs from the initial weights (an unloaded trainer could not
// pass the comparison).
void expect_resume_trains_exactly(const config::RunConfig& config, comm::Communicator& world, const std::string& name) {
  SCOPED_TRACE(name);
  const std::string root = shared_dir(world, "ckpt", name);
  const ResumeRuns r = expect_resume_exact(config, world, root, kSaveAt);
  EXPECT_LT(r.whole.losses.back(), r.whole.losses.front());  // it trained
  std::string worst;
  EXPECT_GT(max_param_rel_diff(r.first, run_from(config, world, 0, 0), &worst), 0.0);
  if (world.rank() == 0) fs::remove_all(root);
}

std::string digits_path() {
  const char* root = std::getenv("CLEAVE_SOURCE_DIR");
  return std::string(root ? root : ".") + "/data/digits.csv.gz";
}

config::RunConfig digits_model(const std::string& model, const std::string& optimizer,
                               const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"train.steps=" + std::to_string(kSteps), "data.path=" + digits_path()};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_config(R"({"model": )" + model + R"(,
    "batch": {"global_batch_size": 32, "micro_batch_size": 8},
    "optimizer": )" + optimizer + R"(,
    "train": {"seed": 5, "deterministic": true, "eval_batches": 0},
    "data": {"type": "digits"}
  })", "digits_model", all);
}

std::string pp(int p) { return "parallel.pipeline_model_parallel_size=" + std::to_string(p); }
std::string tp(int t) { return "parallel.tensor_model_parallel_size=" + std::to_string(t); }

TEST(Checkpoint, ResumeIsBitIdenticalOnOneRank) {
  auto world = make_world(/*deterministic=*/true);
  auto self = world->split(world->rank(), 0, "self");
  if (world->rank() == 0) expect_resume_trains_exactly(tiny_gpt({}), *self, "one_rank");
  world->barrier()->wait();
}

TEST(Checkpoint, ResumeIsBitIdenticalUnderParallelLayouts) {
  auto world = make_world(/*deterministic=*/true);
  std::vector<std::pair<std::string, std::vector<std::string>>> layouts;
  if (world->size() == 2) {
    layouts = {{"pp2", {pp(2)}},
               {"dp2_zero1", {"optimizer.zero_stage=1", "batch.micro_batch_size=2"}},
               {"dp2_zero2", {"optimizer.zero_stage=2", "batch.micro_batch_size=2"}},
               {"pp2_bf16", {pp(2), "device.precision=bf16"}}};
  } else if (world->size() == 4) {
    layouts = {{"dp2_pp2", {pp(2)}},
               {"tp2_pp2", {tp(2), pp(2), "parallel.schedule=interleaved_1f1b"}},
               {"dp2_pp2_zero1", {pp(2), "optimizer.zero_stage=1"}},
               {"dp2_pp2_zero2", {pp(2), "optimizer.zero_stage=2", "optimizer.grad_clip=0.05"}},
               {"dp4_zero1_sgd", {"optimizer.zero_stage=1", "batch.micro_batch_size=2", "optimizer.type=sgd",
                                  "optimizer.momentum=0.9", "optimizer.lr=0.05"}}};
  } else if (world->size() == 8) {
    layouts = {{"dp2_pp2_tp2_zero1", {tp(2), pp(2), "optimizer.zero_stage=1", "parallel.schedule=zb_h1"}}};
  }
  if (layouts.empty()) GTEST_SKIP() << "no layouts for world size " << world->size();
  for (const auto& [name, overrides] : layouts) expect_resume_trains_exactly(tiny_gpt(overrides), *world, name);
}

// The digits MLP (SGD with momentum and weight decay) and CNN (AdamW with clipping) resume exactly too,
// on one rank and (2 ranks) data parallel; one rank also in bf16.
TEST(Checkpoint, ResumeIsBitIdenticalForTheDigitsModels) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() > 2) GTEST_SKIP() << "runs at 1 and 2 ranks";
  const std::string mlp = R"({"type": "mlp", "in_features": 64, "hidden": [64, 32], "num_classes": 10, "activation": "relu"})";
  const std::string cnn =
      R"({"type": "cnn", "in_channels": 1, "height": 8, "width": 8, "channels": [4, 8], "kernel": 3, "pool": 2,
          "num_classes": 10})";
  const std::string sgd = R"({"type": "sgd", "lr": 0.2, "momentum": 0.9, "weight_decay": 0.0001})";
  const std::string adamw = R"({"type": "adamw", "lr": 0.003, "grad_clip": 0.5, "warmup_steps": 2})";
  auto self = world->split(world->rank(), 0, "self");
  if (world->rank() == 0) {
    expect_resume_trains_exactly(digits_model(mlp, sgd, {}), *self, "mlp_one_rank");
    expect_resume_trains_exactly(digits_model(cnn, adamw, {}), *self, "cnn_one_rank");
    expect_resume_trains_exactly(digits_model(cnn, adamw, {"device.precision=bf16"}), *self, "cnn_one_rank_bf16");
  }
  world->barrier()->wait();
  if (world->size() == 2) {
    expect_resume_trains_exactly(digits_model(mlp, sgd, {}), *world, "mlp_dp2");
    expect_resume_trains_exactly(digits_model(cnn, adamw, {"optimizer.zero_stage=1"}), *world, "cnn_dp2_zero1");
  }
}

struct Target {
  std::string name;
  std::vector<std::string> overrides;
};

void expect_reshard_matches_one_rank(comm::Communicator& world, comm::Communicator& self, const std::string& from,
                                     const std::string& dir, const std::vector<Target>& targets);

// The checkpoint `dir` (step kSaveAt) loaded under each target layout continues with the losses one rank
// computes from the same checkpoint, within 1e-5 relative (printed so the bit-equal cases show).
void expect_reshard_matches_one_rank(comm::Communicator& world, comm::Communicator& self, const std::string& from,
                                     const std::string& dir, const std::vector<Target>& targets) {
  RunRecord reference;
  if (world.rank() == 0) {
    reference = run_from(tiny_gpt({}), self, kSaveAt, kSteps, dir);
    const RunRecord unloaded = run_from(tiny_gpt({}), self, kSaveAt, kSaveAt + 1);  // the same step, fresh weights
    EXPECT_GT(std::abs(unloaded.losses.front() - reference.losses.front()), 1e-4) << "the load changed nothing";
  }
  for (const auto& target : targets) {
    SCOPED_TRACE(from + " -> " + target.name);
    const RunRecord resharded = run_from(tiny_gpt(target.overrides), world, kSaveAt, kSteps, dir);
    if (world.rank() != 0) continue;
    ASSERT_EQ(resharded.losses.size(), reference.losses.size());
    for (std::size_t i = 0; i < reference.losses.size(); ++i) {
      const double rel = std::abs(resharded.losses[i] - reference.losses[i]) / std::abs(reference.losses[i]);
      EXPECT_LE(rel, 1e-5) << "step " << kSaveAt + i + 1;
      std::printf("[ reshard] %s -> %-16s step %lld loss %.9f, one rank %.9f (rel %.2g)\n", from.c_str(),
                  target.name.c_str(), static_cast<long long>(kSaveAt + i + 1), resharded.losses[i],
                  reference.losses[i], rel);
    }
  }
  world.barrier()->wait();
}

// Saved under tp2 x pp2 (4 ranks) or dp2 x pp2 x tp2 with ZeRO-1 (8 ranks); loaded by one rank and by other
// layouts. Then the other way: saved by one rank, loaded by the full multi-rank layout.
TEST(Checkpoint, ReshardedLoadContinuesLikeOneRank) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4 && world->size() != 8) GTEST_SKIP() << "needs 4 or 8 ranks";
  auto self = world->split(world->rank(), 0, "self");
  const bool eight = world->size() == 8;
  std::vector<std::string> source = {tp(2), pp(2)};
  std::string from = "tp2xpp2";
  std::vector<Target> targets = {{"pp4", {pp(4)}}, {"dp2xpp2_zero1", {pp(2), "optimizer.zero_stage=1"}}, {"tp4", {tp(4)}},
                                 {"dp4_zero2", {"optimizer.zero_stage=2"}},
                                 {"dp2xpp2_zero3", {pp(2), "optimizer.zero_stage=3"}}};
  if (eight) {
    source.push_back("optimizer.zero_stage=1");
    from = "dp2xpp2xtp2_zero1";
    targets = {{"dp2xpp4", {pp(4)}}, {"tp2xpp4", {tp(2), pp(4)}}, {"dp8_zero1", {"optimizer.zero_stage=1"}}};
  }
  const std::string root = shared_dir(*world, "ckpt", "reshard");
  run_from(tiny_gpt(source), *world, 0, kSaveAt, "", root);
  const std::string dir = step_dir(root, kSaveAt);
  expect_reshard_matches_one_rank(*world, *self, from, dir, targets);
  if (eight) {
    // tp2 on 2 ranks (each pair of ranks loads it; rank 0's pair is compared).
    auto pair = world->split(world->rank() / 2, world->rank() % 2, "pair");
    expect_reshard_matches_one_rank(*pair, *self, from, dir, {{"tp2_on_2_ranks", {tp(2)}}});
    world->barrier()->wait();
  }

  if (!eight) {
    // Saved under ZeRO-3 at dp2 x pp2: every rank writes its segments of the parameters, no rank holds a whole
    // one; loaded by one rank (the reference) and by tp2 x pp2.
    const std::string zero3_root = shared_dir(*world, "ckpt", "reshard_zero3");
    run_from(tiny_gpt({pp(2), "optimizer.zero_stage=3"}), *world, 0, kSaveAt, "", zero3_root);
    expect_reshard_matches_one_rank(*world, *self, "dp2xpp2_zero3",
                                    step_dir(zero3_root, kSaveAt), {{"tp2xpp2", {tp(2), pp(2)}}});
    if (world->rank() == 0) fs::remove_all(zero3_root);
  }

  const std::string single_root = shared_dir(*world, "ckpt", "reshard_single");
  if (world->rank() == 0) run_from(tiny_gpt({}), *self, 0, kSaveAt, "", single_root);
  world->barrier()->wait();
  expect_reshard_matches_one_rank(*world, *self, "one_rank", step_dir(single_root, kSaveAt),
                                  {{from, source}});
  if (world->rank() == 0) {
    fs::remove_all(root);
    fs::remove_all(single_root);
  }
}

// Checkpoints cross ZeRO stages: saved under ZeRO-2 at dp = world (2 ranks), loaded by one rank (ZeRO 0, the
// reference) and at dp2 under ZeRO 0 and ZeRO-1; the optimizer state is written per parameter whatever the
// stage, so a load reshards it like any other layout change.
TEST(Checkpoint, ZeroStagesLoadEachOthersCheckpoints) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  auto self = world->split(world->rank(), 0, "self");
  const std::string root = shared_dir(*world, "ckpt", "zero_stages");
  run_from(tiny_gpt({"optimizer.zero_stage=2"}), *world, 0, kSaveAt, "", root);
  expect_reshard_matches_one_rank(*world, *self, "dp2_zero2", step_dir(root, kSaveAt),
                                  {{"dp2_zero0", {}}, {"dp2_zero1", {"optimizer.zero_stage=1"}},
                                   {"dp2_zero3", {"optimizer.zero_stage=3"}}});
  // ZeRO-3 saves whole values gathered from the shards; what it loads goes back into them.
  const std::string zero3 = shared_dir(*world, "ckpt", "zero_stage_3");
  run_from(tiny_gpt({"optimizer.zero_stage=3"}), *world, 0, kSaveAt, "", zero3);
  expect_reshard_matches_one_rank(*world, *self, "dp2_zero3", step_dir(zero3, kSaveAt),
                                  {{"dp2_zero0", {}}, {"dp2_zero3", {"optimizer.zero_stage=3"}}});
  if (world->rank() == 0) {
    fs::remove_all(root);
    fs::remove_all(zero3);
  }
}

std::string load_error(train::Trainer& trainer, const std::string& dir) {
  try {
    trainer.load_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_all(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
}

// A tp2 x pp2 checkpoint (4 files) damaged four ways, each loaded by one rank: the error names the file,
// the tensor and the numbers, and the parameters stay as they were.
TEST(Checkpoint, BadCheckpointsFailBeforeAnyStepAndChangeNothing) {
  auto world = make_world(/*deterministic=*/true);
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  auto self = world->split(world->rank(), 0, "self");
  const std::string root = shared_dir(*world, "ckpt", "errors");
  run_from(tiny_gpt({tp(2), pp(2)}), *world, 0, 1, "", root);
  world->barrier()->wait();
  if (world->rank() == 0) {
    const fs::path good = fs::path(step_dir(root, 1));
    const auto damaged = [&](const std::string& name) {
      const fs::path copy = fs::path(root) / name;
      fs::copy(good, copy, fs::copy_options::recursive);
      return copy;
    };
    train::Trainer trainer(tiny_gpt({}), *self);
    const auto before = trainer.gather_parameters();

    train::Trainer wider(tiny_gpt({"model.d_model=48"}), *self);
    expect_all(load_error(wider, good.string()),
               {good.string(), "different model", "model.d_model: 32 in the checkpoint, 48 in the config"});

    const fs::path missing = damaged("missing");
    fs::remove(missing / "rank_00003.safetensors");
    expect_all(load_error(trainer, missing.string()),
               {(missing / "rank_00003.safetensors").string(), "is missing", "it holds tensor"});

    const fs::path truncated = damaged("truncated");
    const fs::path file = truncated / "rank_00002.safetensors";
    const auto size = fs::file_size(file);
    fs::resize_file(file, size - 100);
    expect_all(load_error(trainer, truncated.string()),
               {file.string(), std::to_string(size - 100) + " bytes, index.json records " + std::to_string(size),
                "it holds tensor"});

    const fs::path flipped = damaged("flipped");
    const fs::path victim = flipped / "rank_00001.safetensors";
    {
      std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(20);
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x04);
      f.seekp(20);
      f.write(&c, 1);
    }
    expect_all(load_error(trainer, flipped.string()),
               {victim.string(), "checksum fnv1a64:", "does not match", "it holds tensor"});

    const auto after = trainer.gather_parameters();
    EXPECT_TRUE(before == after) << "a failed load changed parameters";
  }
  world->barrier()->wait();
  // Every rank throws, with the failing rank's message, when one rank cannot load.
  const fs::path one_missing = fs::path(root) / "one_missing";
  if (world->rank() == 0) {
    fs::copy(fs::path(step_dir(root, 1)), one_missing, fs::copy_options::recursive);
    fs::remove(one_missing / "rank_00000.safetensors");
  }
  world->barrier()->wait();
  train::Trainer trainer(tiny_gpt({pp(4)}), *world);
  const std::string message = load_error(trainer, one_missing.string());
  expect_all(message, {"rank_00000.safetensors is missing"});
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace cleave::testing::checkpoint_test
