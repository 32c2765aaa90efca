// build_grid_communicators under mpiexec: for every (tp, dp, pp) factorization of the world size, each rank's
// tp / dp / pp / embedding communicators have the members ProcessGrid lists, in its order, and an all_reduce
// inside each group sums exactly the members' contributions.
#include <gtest/gtest.h>

#include <vector>

#include "engine/comm/process_grid.hpp"
#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"

namespace cleave::testing::comm_grid_test {
namespace {

using comm::ProcessGrid;

// The group's all_reduce of (world rank + 1) * (i + 1) must equal (sum of members + n) * (i + 1).
void expect_group(comm::Communicator* group, const std::vector<int>& members, int world_rank, const char* family,
                  const ProcessGrid& grid) {
  if (members.empty()) {
    EXPECT_EQ(group, nullptr) << family << " " << grid.str() << " rank " << world_rank;
    return;
  }
  ASSERT_NE(group, nullptr) << family << " " << grid.str() << " rank " << world_rank;
  EXPECT_EQ(group->world_ranks(), members) << family << " " << grid.str();
  EXPECT_EQ(members[static_cast<std::size_t>(group->rank())], world_rank) << family << " " << grid.str();
  Tensor t = Tensor::empty({37}, DType::kI64, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < 37; ++i) set_value(t, i, static_cast<double>((world_rank + 1) * (i + 1)));
  group->all_reduce(t, comm::ReduceOp::kSum)->wait();
  std::int64_t member_sum = 0;
  for (int m : members) member_sum += m + 1;
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 37; ++i) wrong += get_value(t, i) != static_cast<double>(member_sum * (i + 1));
  EXPECT_EQ(wrong, 0) << family << " " << grid.str() << " rank " << world_rank;
}

TEST(GridCommunicators, EveryFactorizationOfTheWorld) {
  auto world = make_world();
  const int n = world->size();
  const int r = world->rank();
  int layouts = 0;
  for (int tp = 1; tp <= n; ++tp) {
    for (int pp = 1; pp <= n / tp; ++pp) {
      if (n % (tp * pp) != 0) continue;
      const ProcessGrid grid = ProcessGrid::create(n, tp, pp);
      auto groups = comm::build_grid_communicators(*world, grid);
      expect_group(groups.tp.get(), grid.tp_group(r), r, "tp", grid);
      expect_group(groups.dp.get(), grid.dp_group(r), r, "dp", grid);
      expect_group(groups.pp.get(), grid.pp_group(r), r, "pp", grid);
      expect_group(groups.embedding.get(), grid.embedding_group(r), r, "embedding", grid);
      if (groups.dp) {
        EXPECT_EQ(groups.dp->name(), "world/dp");
      }
      ++layouts;
    }
  }
  EXPECT_GE(layouts, 3);
}

TEST(GridCommunicators, WrongWorldSizeIsRefused) {
  auto world = make_world();
  const ProcessGrid grid = ProcessGrid::create(world->size() * 2, 2, 1);
  EXPECT_THROW(comm::build_grid_communicators(*world, grid), Error);
}

}  // namespace
}  // namespace cleave::testing::comm_grid_test
