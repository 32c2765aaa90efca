// rank_gpu (engine/train/rank_setup.hpp): which CUDA device a rank trains on, from its local rank, the node's rank
// count, the GPUs it sees and whether the world lets ranks share a GPU. Pure: no GPU, no MPI.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {
namespace {

std::string error_of(const GpuPlacement& p) {
  try {
    rank_gpu(p);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: local rank " << p.local_rank << " of " << p.local_size << ", " << p.visible_gpus
                << " GPUs";
  return "";
}

TEST(RankGpu, OneVisibleGpuPerRankUnderNccl) {
  // srun --gpus-per-task=1: 8 ranks on the node, each sees its own GPU as cuda:0 (the NCCL world checked that the
  // GPUs are distinct before it was made).
  for (int l = 0; l < 8; ++l) EXPECT_EQ(rank_gpu({l + 8, l, 8, 1, /*gpus_shared=*/false}), 0);
}

TEST(RankGpu, FewerRanksThanGpusTakeTheirLocalRank) {
  for (int l = 0; l < 4; ++l) EXPECT_EQ(rank_gpu({l, l, 4, 8, false}), l);
  EXPECT_EQ(rank_gpu({0, 0, 1, 8, false}), 0);
  EXPECT_EQ(rank_gpu({3, 3, 8, 8, false}), 3);
}

TEST(RankGpu, MoreRanksThanGpusNeedTheStagedWorld) {
  const std::string m = error_of({5, 5, 8, 4, false});
  EXPECT_NE(m.find("8 ranks on this node but 4 GPUs visible to rank 5"), std::string::npos) << m;
  EXPECT_NE(m.find("launch at most 4 ranks per node"), std::string::npos) << m;
  EXPECT_NE(m.find("--gpus-per-task=1"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.comm_backend \"mpi\""), std::string::npos) << m;
  // The staged world shares: local rank mod GPUs.
  EXPECT_EQ(rank_gpu({5, 5, 8, 4, true}), 1);
  EXPECT_EQ(rank_gpu({7, 7, 8, 4, true}), 3);
}

TEST(RankGpu, RanksSharingOneGpuInTheStagedWorld) {
  for (int l = 0; l < 4; ++l) EXPECT_EQ(rank_gpu({l, l, 4, 1, true}), 0);
}

TEST(RankGpu, NoVisibleGpuIsRefused) {
  const std::string m = error_of({2, 0, 1, 0, false});
  EXPECT_NE(m.find("rank 2 sees no CUDA device"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << m;
  error_of({0, 0, 1, 0, true});
}

}  // namespace
}  // namespace cleave::train
