// Rank discovery (world rank and size from each launcher's variables, cross-checked against MPI's numbers),
// local-rank and device selection from launcher variables and host names, the ranks' GPU comparison before a
// NCCL world (no MPI, no GPU).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "engine/comm/launch_env.hpp"
#include "engine/core/error.hpp"

namespace cleave::comm::launch_env_test {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(LaunchEnv, OpenMpiWinsOverSlurmBatchVariables) {
  auto local = local_rank_from_env(env_of({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                           {"SLURM_LOCALID", "0"}}));
  ASSERT_TRUE(local);
  EXPECT_EQ(local->local_rank, 3);
  EXPECT_EQ(local->local_size, 4);
  EXPECT_EQ(local->source, "OMPI_COMM_WORLD_LOCAL_RANK");
}

TEST(LaunchEnv, HydraThenSlurm) {
  auto hydra = local_rank_from_env(env_of({{"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "8"}, {"SLURM_LOCALID", "5"}}));
  ASSERT_TRUE(hydra);
  EXPECT_EQ(hydra->local_rank, 2);
  EXPECT_EQ(hydra->source, "MPI_LOCALRANKID");
  auto slurm = local_rank_from_env(
      env_of({{"SLURM_LOCALID", "5"}, {"SLURM_STEP_NUM_TASKS", "12"}, {"SLURM_STEP_TASKS_PER_NODE", "6(x2)"}}));
  ASSERT_TRUE(slurm);
  EXPECT_EQ(slurm->local_rank, 5);
  EXPECT_EQ(slurm->local_size, 6);
  EXPECT_EQ(slurm->source, "SLURM_LOCALID");
  EXPECT_FALSE(local_rank_from_env(env_of({})));
}

TEST(LaunchEnv, MalformedValueNamesTheVariable) {
  try {
    local_rank_from_env(env_of({{"OMPI_COMM_WORLD_LOCAL_RANK", "two"}}));
    FAIL() << "accepted a non-number";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_LOCAL_RANK='two'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(local_rank_from_env(env_of({{"SLURM_LOCALID", "-1"}, {"SLURM_STEP_NUM_TASKS", "2"}})), Error);
}

TEST(LaunchEnv, ConsistentClaimsAreUsed) {
  const std::vector<std::string> hosts{"a", "a", "b", "b"};
  const std::vector<int> claims{1, 0, 0, 1};  // launcher numbering need not follow global ranks
  const LocalRank r0 = resolve_local_rank(hosts, claims, 0, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(r0.local_rank, 1);
  EXPECT_EQ(r0.local_size, 2);
  EXPECT_EQ(r0.source, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(resolve_local_rank(hosts, claims, 3, "x").local_rank, 1);
}

// The one rule make_world_communicator applies once for the NCCL probe, the NCCL world and the trainer, on
// recorded cases (docs/cuda.md, the trainer on cuda).
TEST(LaunchEnv, OneRuleForTheLocalRankOnRecordedLaunches) {
  // Two nodes, no launcher variable (a plain MPI launch whose local-rank variable the launcher does not export):
  // the position among the ranks on the same host, not the world rank (rank 3 is the second rank of node n2).
  const std::vector<std::string> two_nodes{"n1", "n1", "n2", "n2"};
  const std::vector<int> none{-1, -1, -1, -1};
  for (int r = 0; r < 4; ++r) {
    const LocalRank l = resolve_local_rank(two_nodes, none, r, "hostname");
    EXPECT_EQ(l.local_rank, r % 2) << "rank " << r;
    EXPECT_EQ(l.source, "hostname");
  }
  // The variable present on every rank and consistent with the hosts: it is used as is.
  const std::vector<int> ompi{0, 1, 0, 1};
  EXPECT_EQ(resolve_local_rank(two_nodes, ompi, 3, "OMPI_COMM_WORLD_LOCAL_RANK").local_rank, 1);
  EXPECT_EQ(resolve_local_rank(two_nodes, ompi, 3, "OMPI_COMM_WORLD_LOCAL_RANK").source, "OMPI_COMM_WORLD_LOCAL_RANK");
  // The variable distinct on each host but numbering the ranks otherwise than the host order: the variable wins
  // (the launcher may bind GPUs by its own numbering).
  const std::vector<int> reversed{1, 0, 1, 0};
  EXPECT_EQ(resolve_local_rank(two_nodes, reversed, 0, "SLURM_LOCALID").local_rank, 1);
  EXPECT_EQ(resolve_local_rank(two_nodes, reversed, 3, "SLURM_LOCALID").local_rank, 0);
  // The variable contradicting the hosts (two ranks of n1 both claim 0: an inherited SLURM_LOCALID), or missing on
  // one rank: the host-name allgather wins, on every rank alike.
  const std::vector<int> clash{0, 0, 0, 1};
  const std::vector<int> missing{0, 1, -1, 1};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(resolve_local_rank(two_nodes, clash, r, "SLURM_LOCALID").local_rank, r % 2) << "rank " << r;
    EXPECT_EQ(resolve_local_rank(two_nodes, missing, r, "SLURM_LOCALID").local_rank, r % 2) << "rank " << r;
  }
}

TEST(LaunchEnv, DuplicateOrMissingClaimsFallBackToHostPosition) {
  const std::vector<std::string> hosts{"a", "b", "a", "a", "b"};
  const std::vector<int> inherited{0, 0, 0, 0, 0};  // SLURM_LOCALID of the batch step, inherited by every rank
  EXPECT_EQ(resolve_local_rank(hosts, inherited, 3, "SLURM_LOCALID").local_rank, 2);
  EXPECT_EQ(resolve_local_rank(hosts, inherited, 3, "SLURM_LOCALID").local_size, 3);
  EXPECT_EQ(resolve_local_rank(hosts, inherited, 3, "SLURM_LOCALID").source, "hostname");
  EXPECT_EQ(resolve_local_rank(hosts, inherited, 4, "SLURM_LOCALID").local_rank, 1);
  const std::vector<int> partial{0, 0, 1, -1, 1};
  EXPECT_EQ(resolve_local_rank(hosts, partial, 2, "x").local_rank, 1);
  EXPECT_EQ(resolve_local_rank(hosts, partial, 2, "x").source, "hostname");
}

TEST(LaunchEnv, DeviceSelection) {
  EXPECT_EQ(select_device({3, 4, "x"}, 4, "node1", ""), 3);
  EXPECT_EQ(select_device({3, 4, "x"}, 1, "node1", "5"), 0);  // one GPU bound per rank
  // srun --gpus-per-task=2: local rank 3 sees its own two GPUs (it was refused: "local rank 3 has no GPU of its own").
  EXPECT_EQ(select_device({3, 4, "SLURM_LOCALID"}, 2, "node1", "6,7"), 1);
  EXPECT_EQ(select_device({2, 4, "SLURM_LOCALID"}, 2, "node1", "4,5"), 0);
  try {
    select_device({0, 1, "x"}, 0, "node1", "");
    FAIL() << "no device accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host node1: no CUDA device is visible (CUDA_VISIBLE_DEVICES='')"),
              std::string::npos)
        << e.what();
  }
}

TEST(LaunchEnv, GpuOfLocalRankIsTheLocalRankModTheVisibleGpus) {
  for (int visible = 1; visible <= 8; ++visible) {
    for (int local = 0; local < 16; ++local) {
      const int gpu = gpu_of_local_rank(local, visible);
      EXPECT_GE(gpu, 0);
      EXPECT_LT(gpu, visible);
      EXPECT_EQ(gpu, local % visible) << "local rank " << local << ", " << visible << " GPUs";
      if (local < visible) {
        EXPECT_EQ(gpu, local) << "torchrun's rule: cuda:LOCAL_RANK";
      }
    }
  }
}

// The records the NCCL world's probe compares (nccl_world.cpp): each rank's host and the PCI bus id of the device
// select_device picked, or select_device's refusal.
GpuRecord record_of(const LocalRank& local, int visible, const std::vector<std::string>& bus_ids,
                    const std::string& host) {
  try {
    return {host, bus_ids.at(static_cast<std::size_t>(select_device(local, visible, host, ""))), ""};
  } catch (const Error& e) {
    return {host, "", e.what()};
  }
}

TEST(GpuOwnership, OneGpuPerRankBoundByTheLauncherIsOwn) {
  // srun --gpus-per-task=1 on two nodes of 4: every rank sees one GPU (its cuda:0), a different one.
  std::vector<GpuRecord> records;
  for (const char* host : {"n1", "n2"}) {
    for (int l = 0; l < 4; ++l) {
      records.push_back(record_of({l, 4, "SLURM_LOCALID"}, 1, {fmt::format("0000:{:02x}:00.0", 0x10 + l)}, host));
    }
  }
  const GpuOwnership verdict = gpu_ownership(records);
  EXPECT_TRUE(verdict.own) << verdict.detail;
  EXPECT_EQ(verdict.detail, "");
}

TEST(GpuOwnership, RanksSharingOneGpuAreNamedWithTheGpuAndHost) {
  // Three ranks on n1 each see the same single GPU (no per-rank binding); n2's rank has its own.
  std::vector<GpuRecord> records;
  for (int l = 0; l < 3; ++l) records.push_back(record_of({l, 3, "x"}, 1, {"0000:17:00.0"}, "n1"));
  records.push_back(record_of({0, 1, "x"}, 1, {"0000:17:00.0"}, "n2"));  // same bus id, other host: not shared
  const GpuOwnership verdict = gpu_ownership(records);
  EXPECT_FALSE(verdict.own);
  EXPECT_EQ(verdict.detail, "ranks 0, 1 and 2 share GPU 0000:17:00.0 on host n1");
  EXPECT_EQ(gpu_ownership(std::vector<GpuRecord>{records[3], records[0], records[1]}).detail,
            "ranks 1 and 2 share GPU 0000:17:00.0 on host n1");
  // The same bus id on two hosts alone is two GPUs.
  EXPECT_TRUE(gpu_ownership(std::vector<GpuRecord>{records[0], records[3]}).own);
}

TEST(GpuOwnership, MoreRanksThanTheGpusTheyAllSeeAreNamedSharing) {
  // mpirun -np 3 on a node whose two GPUs every rank sees: rank 2 wraps round to the first (it was refused on its
  // own before the comparison; the comparison names the pair now).
  const std::vector<std::string> bus{"0000:01:00.0", "0000:02:00.0"};
  std::vector<GpuRecord> records;
  for (int l = 0; l < 3; ++l) records.push_back(record_of({l, 3, "OMPI_COMM_WORLD_LOCAL_RANK"}, 2, bus, "n1"));
  const GpuOwnership verdict = gpu_ownership(records);
  EXPECT_FALSE(verdict.own);
  EXPECT_EQ(verdict.detail, "ranks 0 and 2 share GPU 0000:01:00.0 on host n1");
}

TEST(GpuOwnership, RankWithoutAGpuIsNamed) {
  std::vector<GpuRecord> records{record_of({0, 2, "x"}, 1, {"0000:01:00.0"}, "n1"),
                                 record_of({1, 2, "x"}, 0, {}, "n1")};
  const GpuOwnership verdict = gpu_ownership(records);
  EXPECT_FALSE(verdict.own);
  EXPECT_NE(verdict.detail.find("rank 1 has no GPU of its own (host n1: no CUDA device is visible"), std::string::npos)
      << verdict.detail;
}

// Recorded launches with k GPUs bound to each rank: what each rank's CUDA_VISIBLE_DEVICES lists (physical GPU
// indices, the bus ids below), the launcher's local rank, and the physical GPU the rank must land on (one of its
// own, every rank's distinct), so NCCL's probe finds every GPU owned.
struct BoundLaunch {
  const char* what;
  int ranks_per_node;
  std::vector<std::vector<int>> visible;  // per local rank: the physical GPUs it sees
  std::vector<int> expected;              // per local rank: the physical GPU it takes
};

TEST(GpuOwnership, KGpusBoundPerRankEachRankTakesOneOfItsOwn) {
  const std::vector<BoundLaunch> launches{
      {"srun --ntasks-per-node=4 --gpus-per-task=2 (8 GPUs)", 4, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {0, 3, 4, 7}},
      {"srun --ntasks-per-node=2 --gpus-per-task=4 (8 GPUs)", 2, {{0, 1, 2, 3}, {4, 5, 6, 7}}, {0, 5}},
      {"srun --ntasks-per-node=8 --gpus-per-task=1", 8, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"wrapper: CUDA_VISIBLE_DEVICES=$((2*L)),$((2*L+1)), 3 ranks", 3, {{0, 1}, {2, 3}, {4, 5}}, {0, 3, 4}},
      {"torchrun --nproc-per-node=8: every rank sees all 8", 8,
       std::vector<std::vector<int>>(8, {0, 1, 2, 3, 4, 5, 6, 7}), {0, 1, 2, 3, 4, 5, 6, 7}},
      {"mpirun -np 4 on an 8-GPU node: every rank sees all 8", 4, std::vector<std::vector<int>>(4, {0, 1, 2, 3, 4, 5, 6, 7}),
       {0, 1, 2, 3}},
  };
  const auto bus_of = [](int physical) { return fmt::format("0000:{:02x}:00.0", 0x10 + physical); };
  for (const BoundLaunch& launch : launches) {
    std::vector<GpuRecord> records;
    for (const char* host : {"n1", "n2"}) {
      for (int l = 0; l < launch.ranks_per_node; ++l) {
        std::vector<std::string> bus;
        for (int physical : launch.visible[static_cast<std::size_t>(l)]) bus.push_back(bus_of(physical));
        records.push_back(record_of({l, launch.ranks_per_node, "SLURM_LOCALID"}, static_cast<int>(bus.size()), bus, host));
        EXPECT_EQ(records.back().gpu, bus_of(launch.expected[static_cast<std::size_t>(l)]))
            << launch.what << ", local rank " << l << ": " << records.back().error;
      }
    }
    const GpuOwnership verdict = gpu_ownership(records);
    EXPECT_TRUE(verdict.own) << launch.what << ": " << verdict.detail;
  }
}

TEST(GpuOwnership, FewerRanksThanVisibleGpusIsOwn) {
  const std::vector<std::string> bus{"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"};
  std::vector<GpuRecord> records;
  for (int l = 0; l < 2; ++l) records.push_back(record_of({l, 2, "x"}, 4, bus, "n1"));
  EXPECT_EQ(records[1].gpu, "0000:02:00.0");
  EXPECT_TRUE(gpu_ownership(records).own);
}

// The message of the Error `fn` throws (fails the test when it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

TEST(LaunchEnv, WorldPlaceFromEachLauncher) {
  auto ompi = world_place_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  ASSERT_TRUE(ompi);
  EXPECT_EQ(ompi->rank, 3);
  EXPECT_EQ(ompi->size, 4);
  EXPECT_EQ(ompi->rank_var, "OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(ompi->size_var, "OMPI_COMM_WORLD_SIZE");

  auto hydra = world_place_from_env(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  ASSERT_TRUE(hydra);
  EXPECT_EQ(hydra->rank, 1);
  EXPECT_EQ(hydra->size_var, "PMI_SIZE");

  auto srun = world_place_from_env(env_of({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "8"},
                                           {"SLURM_NTASKS", "16"}, {"PMIX_RANK", "5"}}));
  ASSERT_TRUE(srun);
  EXPECT_EQ(srun->rank, 5);
  EXPECT_EQ(srun->size, 8);  // the step's tasks, not the allocation's
  EXPECT_EQ(srun->rank_var, "SLURM_PROCID");

  auto pmix = world_place_from_env(env_of({{"PMIX_RANK", "2"}}));
  ASSERT_TRUE(pmix);
  EXPECT_EQ(pmix->rank, 2);
  EXPECT_EQ(pmix->size, 0);  // PMIx exports no size
  EXPECT_EQ(pmix->size_var, "");

  EXPECT_FALSE(world_place_from_env(env_of({})));
}

TEST(LaunchEnv, MpirunInsideAnAllocationIgnoresTheBatchStepVariables) {
  // sbatch script: SLURM_PROCID=0 / SLURM_NTASKS describe the allocation; mpirun's variables speak for the launch.
  auto place = world_place_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                            {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"},
                                            {"SLURM_STEP_NUM_TASKS", "1"}}));
  ASSERT_TRUE(place);
  EXPECT_EQ(place->rank_var, "OMPI_COMM_WORLD_RANK");
  EXPECT_NO_THROW(check_world_place(place, 2, 4));
  // A plain `cleave train` in the batch script itself: no launch, a world of one.
  EXPECT_FALSE(world_place_from_env(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}})));
}

TEST(LaunchEnv, MalformedWorldVariablesNameTheVariable) {
  EXPECT_NE(error_of([] { world_place_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "x1"}})); })
                .find("OMPI_COMM_WORLD_RANK='x1' is not a non-negative integer"),
            std::string::npos);
  const std::string m = error_of([] {
    world_place_from_env(env_of({{"SLURM_PROCID", "4"}, {"SLURM_STEP_NUM_TASKS", "4"}}));
  });
  EXPECT_NE(m.find("SLURM_PROCID=4 is not a rank of a world of SLURM_STEP_NUM_TASKS=4"), std::string::npos) << m;
  EXPECT_THROW(world_place_from_env(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}})), Error);
}

TEST(LaunchEnv, AgreementWithMpiPasses) {
  EXPECT_NO_THROW(check_world_place(std::nullopt, 0, 1));
  EXPECT_NO_THROW(check_world_place(WorldPlace{3, 4, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, 3, 4));
  EXPECT_NO_THROW(check_world_place(WorldPlace{1, 0, "PMIX_RANK", ""}, 1, 4));  // no size to compare
}

TEST(LaunchEnv, SingletonWorldsFromSrunWithoutPmixAreRefused) {
  const std::string m = error_of([] {
    check_world_place(WorldPlace{2, 4, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"}, 0, 1);
  });
  EXPECT_NE(m.find("the launcher says rank 2 of 4 (SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=4)"), std::string::npos) << m;
  EXPECT_NE(m.find("MPI_COMM_WORLD says rank 0 of 1"), std::string::npos) << m;
  EXPECT_NE(m.find("srun --mpi=pmix"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;  // one line
  // Rank 0 of such a launch is caught by the size alone.
  EXPECT_NE(error_of([] { check_world_place(WorldPlace{0, 4, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"}, 0, 1); })
                .find("rank 0 of 4"),
            std::string::npos);
}

TEST(LaunchEnv, RankOrSizeMismatchNamesBothSides) {
  const std::string rank = error_of([] {
    check_world_place(WorldPlace{1, 4, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, 2, 4);
  });
  EXPECT_NE(rank.find("OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4"), std::string::npos) << rank;
  EXPECT_NE(rank.find("MPI_COMM_WORLD says rank 2 of 4"), std::string::npos) << rank;
  const std::string size = error_of([] { check_world_place(WorldPlace{1, 0, "PMIX_RANK", ""}, 0, 2); });
  EXPECT_NE(size.find("the launcher says rank 1 (PMIX_RANK=1)"), std::string::npos) << size;
  EXPECT_NE(size.find("MPI_COMM_WORLD says rank 0 of 2"), std::string::npos) << size;
}

}  // namespace
}  // namespace cleave::comm::launch_env_test
