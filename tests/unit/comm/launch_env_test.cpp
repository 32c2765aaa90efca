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

namespace cleave::comm {
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
  auto slurm = local_rank_from_env(env_of({{"SLURM_LOCALID", "5"}, {"SLURM_NTASKS_PER_NODE", "4(x2)"}}));
  ASSERT_TRUE(slurm);
  EXPECT_EQ(slurm->local_rank, 5);
  EXPECT_EQ(slurm->local_size, 0);  // not a plain count
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
  EXPECT_THROW(local_rank_from_env(env_of({{"SLURM_LOCALID", "-1"}})), Error);
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
  try {
    select_device({4, 8, "OMPI_COMM_WORLD_LOCAL_RANK"}, 4, "node1", "0,1,2,3");
    FAIL() << "local rank 4 with 4 devices accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("host node1: local rank 4 (from OMPI_COMM_WORLD_LOCAL_RANK)"), std::string::npos) << m;
    EXPECT_NE(m.find("4 devices visible (CUDA_VISIBLE_DEVICES='0,1,2,3')"), std::string::npos) << m;
  }
  EXPECT_THROW(select_device({0, 1, "x"}, 0, "node1", ""), Error);
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

TEST(GpuOwnership, MoreRanksThanVisibleGpusNamesTheRankWithoutOne) {
  const std::vector<std::string> bus{"0000:01:00.0", "0000:02:00.0"};
  std::vector<GpuRecord> records;
  for (int l = 0; l < 3; ++l) records.push_back(record_of({l, 3, "OMPI_COMM_WORLD_LOCAL_RANK"}, 2, bus, "n1"));
  const GpuOwnership verdict = gpu_ownership(records);
  EXPECT_FALSE(verdict.own);
  EXPECT_NE(verdict.detail.find("rank 2 has no GPU of its own (host n1: local rank 2"), std::string::npos)
      << verdict.detail;
  EXPECT_NE(verdict.detail.find("2 devices visible"), std::string::npos) << verdict.detail;
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
}  // namespace cleave::comm
