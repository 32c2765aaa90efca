// srun launches as a rank sees them: environments recorded from tasks of SLURM 22.05 srun (a single-node SLURM with
// four GPUs in gres.conf, task/none: no device cgroup), run through what a rank does with them: its world place
// (checked against MPI's numbers), its local rank and the node's task count, the device it takes (cuda:<local rank
// mod the GPUs it sees>) and the NCCL world's PCI-bus-id comparison. No MPI, no GPU: the GPUs a task sees are the
// entries of its CUDA_VISIBLE_DEVICES, in that order, as the CUDA runtime enumerates them.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/comm/launch_env.hpp"
#include "engine/core/error.hpp"

namespace cleave::comm::srun_launch_env_test {
namespace {

using Env = std::map<std::string, std::string>;

// "K=V K=V ..." as `env` printed it.
Env parse_env(const std::string& line) {
  Env env;
  std::istringstream in(line);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    env[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return env;
}

EnvLookup lookup(const Env& env) {
  return [&env](std::string_view name) -> std::optional<std::string> {
    const auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// The GPU indices a list variable names ("0,1"): CUDA_VISIBLE_DEVICES, or SLURM_STEP_GPUS.
std::vector<int> gpu_list(const Env& env, const std::string& var = "CUDA_VISIBLE_DEVICES") {
  std::vector<int> out;
  const auto it = env.find(var);
  if (it == env.end()) return out;
  std::istringstream in(it->second);
  for (std::string id; std::getline(in, id, ',');) out.push_back(std::stoi(id));
  return out;
}

std::string bus_of(int physical) { return fmt::format("0000:{:02x}:00.0", 0x10 + physical); }

// One launch: the variables every task had alike, then each task's own (as recorded, in SLURM_PROCID order).
struct RecordedLaunch {
  const char* command;
  const char* common;
  std::vector<const char*> tasks;
};

const char* const kStep4 =
    "SLURM_GPUS_ON_NODE=4 SLURM_NODEID=0 SLURM_NPROCS=4 SLURM_NTASKS=4 SLURM_STEPID=0 SLURM_STEP_NUM_NODES=1 "
    "SLURM_STEP_NUM_TASKS=4 SLURM_STEP_TASKS_PER_NODE=4 SLURM_TASKS_PER_NODE=4";

const RecordedLaunch kPerTask1{"srun --mpi=pmix -n 4 --gpus-per-task=1", kStep4,
                               {"CUDA_VISIBLE_DEVICES=0 SLURM_STEP_GPUS=0 SLURM_LOCALID=0 SLURM_PROCID=0 PMIX_RANK=0",
                                "CUDA_VISIBLE_DEVICES=1 SLURM_STEP_GPUS=1 SLURM_LOCALID=1 SLURM_PROCID=1 PMIX_RANK=1",
                                "CUDA_VISIBLE_DEVICES=2 SLURM_STEP_GPUS=2 SLURM_LOCALID=2 SLURM_PROCID=2 PMIX_RANK=2",
                                "CUDA_VISIBLE_DEVICES=3 SLURM_STEP_GPUS=3 SLURM_LOCALID=3 SLURM_PROCID=3 PMIX_RANK=3"}};
const RecordedLaunch kBindSingle{"srun --mpi=pmix -n 4 --gpus=4 --gpu-bind=single:1", kStep4, kPerTask1.tasks};
const RecordedLaunch kPerTask2{
    "srun --mpi=pmix -n 2 --gpus-per-task=2",
    "SLURM_GPUS_ON_NODE=4 SLURM_NODEID=0 SLURM_NPROCS=2 SLURM_NTASKS=2 SLURM_STEPID=0 SLURM_STEP_NUM_NODES=1 "
    "SLURM_STEP_NUM_TASKS=2 SLURM_STEP_TASKS_PER_NODE=2 SLURM_TASKS_PER_NODE=2",
    {"CUDA_VISIBLE_DEVICES=0,1 SLURM_STEP_GPUS=0,1 SLURM_LOCALID=0 SLURM_PROCID=0 PMIX_RANK=0",
     "CUDA_VISIBLE_DEVICES=2,3 SLURM_STEP_GPUS=2,3 SLURM_LOCALID=1 SLURM_PROCID=1 PMIX_RANK=1"}};
const RecordedLaunch kGpus4{"srun --mpi=pmix -n 4 --gpus=4 (the same with --gres=gpu:4)",
                            kStep4,
                            {"CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_STEP_GPUS=0,1,2,3 SLURM_LOCALID=0 SLURM_PROCID=0",
                             "CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_STEP_GPUS=0,1,2,3 SLURM_LOCALID=1 SLURM_PROCID=1",
                             "CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_STEP_GPUS=0,1,2,3 SLURM_LOCALID=2 SLURM_PROCID=2",
                             "CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_STEP_GPUS=0,1,2,3 SLURM_LOCALID=3 SLURM_PROCID=3"}};
const RecordedLaunch kNoGpus{"srun --mpi=pmix -n 2 (no GPU asked for)",
                             "SLURM_NODEID=0 SLURM_NPROCS=2 SLURM_NTASKS=2 SLURM_STEPID=0 SLURM_STEP_NUM_NODES=1 "
                             "SLURM_STEP_NUM_TASKS=2 SLURM_STEP_TASKS_PER_NODE=2 SLURM_TASKS_PER_NODE=2",
                             {"SLURM_LOCALID=0 SLURM_PROCID=0 PMIX_RANK=0",
                              "SLURM_LOCALID=1 SLURM_PROCID=1 PMIX_RANK=1"}};
// sbatch -n 4 --ntasks-per-node=4 --gpus-per-task=1: the batch script's own environment (no srun step).
const char* const kBatchScript =
    "CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_JOB_NUM_NODES=1 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NTASKS=4 "
    "SLURM_NTASKS_PER_NODE=4 SLURM_PROCID=0 SLURM_TASKS_PER_NODE=4";

// What a rank of the launch does with its environment, on host `host`.
struct RankView {
  Env env;
  std::string host;
  LocalRank local;  // from its variable alone (threads, host memory); the world's is resolve_local_rank's
  GpuRecord gpu;
};

// `physical_var` lists the node's GPUs the task's devices are, in device order: CUDA_VISIBLE_DEVICES without a device
// cgroup; `rewrite` changes each task's environment first.
std::vector<RankView> ranks_of(const RecordedLaunch& launch, const std::string& host,
                               const std::string& physical_var = "CUDA_VISIBLE_DEVICES",
                               const std::function<void(Env&)>& rewrite = {}) {
  std::vector<RankView> ranks;
  for (const char* task : launch.tasks) {
    RankView r{parse_env(std::string(launch.common) + " " + task), host, {}, {}};
    if (rewrite) rewrite(r.env);
    const std::optional<WorldPlace> place = world_place_from_env(lookup(r.env));
    EXPECT_TRUE(place) << launch.command;
    if (place) {
      EXPECT_EQ(place->rank_var, "SLURM_PROCID") << launch.command;
      EXPECT_EQ(place->size, static_cast<int>(launch.tasks.size())) << launch.command;
      EXPECT_NO_THROW(check_world_place(place, place->rank, static_cast<int>(launch.tasks.size())));
    }
    const std::optional<LocalRank> local = local_rank_from_env(lookup(r.env));
    EXPECT_TRUE(local) << launch.command;
    if (local) r.local = *local;
    ranks.push_back(std::move(r));
  }
  // The world's local rank: every rank's claim and host, resolved once (make_world_communicator).
  std::vector<std::string> hosts;
  std::vector<int> claims;
  for (const RankView& r : ranks) {
    hosts.push_back(r.host);
    claims.push_back(r.local.local_rank);
  }
  for (std::size_t q = 0; q < ranks.size(); ++q) {
    const LocalRank world = resolve_local_rank(hosts, claims, static_cast<int>(q), ranks[q].local.source);
    EXPECT_EQ(world.source, "SLURM_LOCALID") << launch.command;
    const std::vector<int> visible = gpu_list(ranks[q].env);
    const std::vector<int> physical = gpu_list(ranks[q].env, physical_var);
    try {
      const int device = select_device(world, static_cast<int>(visible.size()), host, "");
      ranks[q].gpu = {host, bus_of(physical.at(static_cast<std::size_t>(device))), ""};
    } catch (const Error& e) {
      ranks[q].gpu = {host, "", e.what()};
    }
  }
  return ranks;
}

// The device index each rank takes (the position of its GPU in its list of physical GPUs).
std::vector<int> devices_of(const std::vector<RankView>& ranks,
                            const std::string& physical_var = "CUDA_VISIBLE_DEVICES") {
  std::vector<int> out;
  for (const RankView& r : ranks) {
    const std::vector<int> visible = gpu_list(r.env, physical_var);
    int device = -1;
    for (std::size_t i = 0; i < visible.size(); ++i) {
      if (bus_of(visible[i]) == r.gpu.gpu) device = static_cast<int>(i);
    }
    out.push_back(device);
  }
  return out;
}

GpuOwnership verdict_of(const std::vector<RankView>& ranks) {
  std::vector<GpuRecord> records;
  for (const RankView& r : ranks) records.push_back(r.gpu);
  return gpu_ownership(records);
}

TEST(SrunLaunch, GpusPerTaskOneIsEveryRankOnItsOwnCuda0) {
  for (const RecordedLaunch* launch : {&kPerTask1, &kBindSingle}) {
    const std::vector<RankView> ranks = ranks_of(*launch, "vm");
    EXPECT_EQ(devices_of(ranks), (std::vector<int>{0, 0, 0, 0})) << launch->command;
    for (std::size_t q = 0; q < ranks.size(); ++q) {
      EXPECT_EQ(ranks[q].local.local_rank, static_cast<int>(q));
      EXPECT_EQ(ranks[q].local.local_size, 4) << launch->command << ": SLURM_STEP_TASKS_PER_NODE";
      EXPECT_EQ(ranks[q].gpu.gpu, bus_of(static_cast<int>(q))) << launch->command;
    }
    const GpuOwnership verdict = verdict_of(ranks);
    EXPECT_TRUE(verdict.own) << launch->command << ": " << verdict.detail;
  }
}

TEST(SrunLaunch, GpusPerTaskOneUnderADeviceCgroupIsOwnToo) {
  // With a device cgroup per task, a task's one GPU (its SLURM_STEP_GPUS) is its only device, listed as 0: every
  // rank sees one device, CUDA_VISIBLE_DEVICES=0, and still holds its own physical GPU (the bus ids tell them apart).
  const std::vector<RankView> ranks =
      ranks_of(kPerTask1, "vm", "SLURM_STEP_GPUS", [](Env& env) { env["CUDA_VISIBLE_DEVICES"] = "0"; });
  EXPECT_EQ(devices_of(ranks, "SLURM_STEP_GPUS"), (std::vector<int>{0, 0, 0, 0}));
  for (std::size_t q = 0; q < ranks.size(); ++q) EXPECT_EQ(ranks[q].gpu.gpu, bus_of(static_cast<int>(q)));
  EXPECT_TRUE(verdict_of(ranks).own) << verdict_of(ranks).detail;
}

TEST(SrunLaunch, GpusPerTaskTwoTakesOneOfItsOwn) {
  const std::vector<RankView> ranks = ranks_of(kPerTask2, "vm");
  EXPECT_EQ(devices_of(ranks), (std::vector<int>{0, 1}));
  EXPECT_EQ(ranks[0].gpu.gpu, bus_of(0));
  EXPECT_EQ(ranks[1].gpu.gpu, bus_of(3));
  EXPECT_EQ(ranks[1].local.local_size, 2);
  EXPECT_TRUE(verdict_of(ranks).own) << verdict_of(ranks).detail;
}

TEST(SrunLaunch, WithoutGpusPerTaskEachRankTakesCudaLocalRank) {
  const std::vector<RankView> ranks = ranks_of(kGpus4, "vm");
  EXPECT_EQ(devices_of(ranks), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(verdict_of(ranks).own) << verdict_of(ranks).detail;
}

TEST(SrunLaunch, MoreTasksThanGpusAreNamedSharing) {
  // srun -n 8 --gpus=4: every task sees the 4 GPUs (recorded: CUDA_VISIBLE_DEVICES=0,1,2,3 on each, STEP_TASKS 8).
  RecordedLaunch eight{"srun --mpi=pmix -n 8 --gpus=4",
                       "SLURM_GPUS_ON_NODE=4 SLURM_NODEID=0 SLURM_NPROCS=8 SLURM_NTASKS=8 SLURM_STEPID=0 "
                       "SLURM_STEP_NUM_NODES=1 SLURM_STEP_NUM_TASKS=8 SLURM_STEP_TASKS_PER_NODE=8 "
                       "SLURM_TASKS_PER_NODE=8 CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_STEP_GPUS=0,1,2,3",
                       {}};
  std::vector<std::string> tasks;
  for (int t = 0; t < 8; ++t) tasks.push_back(fmt::format("SLURM_LOCALID={0} SLURM_PROCID={0} PMIX_RANK={0}", t));
  for (const std::string& t : tasks) eight.tasks.push_back(t.c_str());
  const std::vector<RankView> ranks = ranks_of(eight, "vm");
  EXPECT_EQ(devices_of(ranks), (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(ranks[7].local.local_size, 8);
  const GpuOwnership verdict = verdict_of(ranks);
  EXPECT_FALSE(verdict.own);
  EXPECT_EQ(verdict.detail, "ranks 0 and 4 share GPU 0000:10:00.0 on host vm");
}

TEST(SrunLaunch, TwoNodesOfGpusPerTaskOneAreOwn) {
  // The recorded one-node step as the second node of a two-node step sees it: SLURM_NODEID 1, ranks 4-7, the same
  // local ids and CUDA_VISIBLE_DEVICES (the node's GPUs carry the same indices and bus ids on both hosts).
  std::vector<RankView> ranks = ranks_of(kPerTask1, "n1");
  std::vector<RankView> second = ranks_of(kPerTask1, "n2");
  ranks.insert(ranks.end(), second.begin(), second.end());
  EXPECT_TRUE(verdict_of(ranks).own) << verdict_of(ranks).detail;
  const Env env = parse_env(std::string(kStep4) + " " + kPerTask1.tasks[1] +
                            " SLURM_NODEID=1 SLURM_STEP_NUM_NODES=2 SLURM_STEP_NUM_TASKS=8 SLURM_PROCID=5 "
                            "SLURM_STEP_TASKS_PER_NODE=4(x2)");
  const std::optional<WorldPlace> place = world_place_from_env(lookup(env));
  ASSERT_TRUE(place);
  EXPECT_EQ(place->rank, 5);
  EXPECT_EQ(place->size, 8);
  EXPECT_EQ(local_rank_from_env(lookup(env))->local_size, 4);
}

TEST(SrunLaunch, NoGpuAskedForStillPlacesTheRanks) {
  for (int t = 0; t < 2; ++t) {
    const Env env = parse_env(std::string(kNoGpus.common) + " " + kNoGpus.tasks[static_cast<std::size_t>(t)]);
    const std::optional<LocalRank> local = local_rank_from_env(lookup(env));
    ASSERT_TRUE(local);
    EXPECT_EQ(local->local_rank, t);
    EXPECT_EQ(local->local_size, 2);
    EXPECT_EQ(gpu_list(env).size(), 0u);  // a cuda run is refused by select_device, naming CUDA_VISIBLE_DEVICES
  }
}

TEST(SrunLaunch, TheBatchScriptItselfIsNoLaunch) {
  // A plain `cleave train` in the script: a world of one, no local rank from SLURM (its SLURM_LOCALID=0 and
  // SLURM_NTASKS_PER_NODE=4 describe the allocation, not this process: 4 would quarter its threads).
  const Env env = parse_env(kBatchScript);
  EXPECT_FALSE(world_place_from_env(lookup(env)));
  EXPECT_FALSE(local_rank_from_env(lookup(env)));
  EXPECT_EQ(select_device({0, 1, "hostname"}, 4, "vm", "0,1,2,3"), 0);
}

TEST(SrunLaunch, TasksPerNodeOfEachShape) {
  const auto size = [](const char* per_node, const char* node) {
    Env env{{"SLURM_LOCALID", "0"}, {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_STEP_TASKS_PER_NODE", per_node}};
    if (node != nullptr) env["SLURM_NODEID"] = node;
    return local_rank_from_env(lookup(env))->local_size;
  };
  EXPECT_EQ(size("4", nullptr), 4);
  EXPECT_EQ(size("4(x2)", "1"), 4);
  EXPECT_EQ(size("2(x3),1", "2"), 2);
  EXPECT_EQ(size("2(x3),1", "3"), 1);
  EXPECT_EQ(size("3,1", "1"), 1);
  EXPECT_EQ(size("3,1", nullptr), 0);   // the counts differ and the node is unknown
  EXPECT_EQ(size("3,1", "2"), 0);       // a node past the list
  EXPECT_EQ(size("4(x", "0"), 0);       // does not parse
  EXPECT_EQ(size("0", "0"), 0);
  EXPECT_EQ(size("", "0"), 0);
}

}  // namespace
}  // namespace cleave::comm::srun_launch_env_test
