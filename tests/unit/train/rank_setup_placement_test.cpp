// rank_gpu (engine/train/rank_setup.hpp): which CUDA device a rank trains on, from its local rank and the GPUs it
// sees, on the launches users run (mpirun, torchrun, srun with 1, 2 or 4 GPUs per task). Pure: no GPU, no MPI.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/comm/launch_env.hpp"
#include "engine/core/error.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train::rank_setup_placement_test {
namespace {

TEST(RankGpu, OneVisibleGpuPerRank) {
  // srun --gpus-per-task=1: 8 ranks on the node, each sees its own GPU as cuda:0 (the NCCL world checked that the
  // GPUs are distinct before it was made); the staged world's ranks sharing one GPU land on it alike.
  for (int l = 0; l < 8; ++l) EXPECT_EQ(rank_gpu({l + 8, l, 1}), 0);
}

TEST(RankGpu, EveryGpuOfTheNodeVisibleTakesTheLocalRank) {
  // torchrun --nproc-per-node=8, mpirun -np 4 on an 8-GPU node: torchrun's cuda:LOCAL_RANK.
  for (int l = 0; l < 8; ++l) EXPECT_EQ(rank_gpu({l, l, 8}), l);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(rank_gpu({l + 4, l, 8}), l);
}

TEST(RankGpu, KGpusBoundPerRankTakesOneOfItsOwn) {
  // srun --ntasks-per-node=4 --gpus-per-task=2: each rank sees its own two GPUs as cuda:0 and cuda:1. Local ranks
  // 2 and 3 were refused ("4 ranks on this node but 2 GPUs visible"); each now takes one of its own.
  const std::vector<int> two{0, 1, 0, 1};
  for (int l = 0; l < 4; ++l) EXPECT_EQ(rank_gpu({l, l, 2}), two[static_cast<std::size_t>(l)]) << "local rank " << l;
  // --ntasks-per-node=2 --gpus-per-task=4.
  EXPECT_EQ(rank_gpu({0, 0, 4}), 0);
  EXPECT_EQ(rank_gpu({1, 1, 4}), 1);
  // Without a launcher's local rank the world rank stands in (one node holds the world): Megatron's rank % GPUs.
  EXPECT_EQ(rank_gpu({9, 9, 8}), 1);
}

TEST(RankGpu, AgreesWithTheNcclProbe) {
  // The NCCL world compares the GPUs select_device picks; the trainer must run on the same one.
  for (int visible = 1; visible <= 8; ++visible) {
    for (int l = 0; l < 16; ++l) {
      EXPECT_EQ(rank_gpu({l, l, visible}), comm::select_device({l, 16, "x"}, visible, "n1", ""))
          << "local rank " << l << ", " << visible << " GPUs";
    }
  }
}

TEST(RankGpu, NoVisibleGpuIsRefused) {
  try {
    rank_gpu({2, 0, 0});
    FAIL() << "a rank without a GPU was placed";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2 sees no CUDA device"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << m;
    EXPECT_NE(m.find("device.type \"cpu\""), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace cleave::train::rank_setup_placement_test
