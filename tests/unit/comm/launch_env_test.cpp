// Local-rank and device selection from launcher variables and host names (no MPI, no GPU).
#include <gtest/gtest.h>

#include <map>

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

}  // namespace
}  // namespace cleave::comm
