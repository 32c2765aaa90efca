// ProcessGrid without MPI: rank <-> coordinates round-trips, every group family partitions the world with the
// documented ordering, tp peers are neighbours, embedding groups hold the first and last stage, and bad
// layouts fail with messages that name the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <set>

#include "engine/comm/process_grid.hpp"

namespace cleave::comm::grid_test {
namespace {

// Every rank appears in exactly one group of the family, and group_of(rank) is the group holding it.
template <typename GroupOf>
void expect_partition(const ProcessGrid& grid, const std::vector<std::vector<int>>& groups, GroupOf group_of,
                      int expected_group_size, const char* family) {
  std::vector<int> seen(static_cast<std::size_t>(grid.world_size()), 0);
  for (const auto& g : groups) {
    EXPECT_EQ(static_cast<int>(g.size()), expected_group_size) << family << " " << grid.str();
    for (int r : g) {
      ++seen[static_cast<std::size_t>(r)];
      EXPECT_EQ(group_of(r), g) << family << " group of rank " << r << " in " << grid.str();
    }
  }
  for (int r = 0; r < grid.world_size(); ++r) {
    EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1) << family << ": rank " << r << " in " << grid.str();
  }
}

class GridLayouts : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(GridLayouts, CoordinatesRoundTripAndGroupsPartitionTheWorld) {
  const auto [tp, dp, pp] = GetParam();
  const ProcessGrid grid = ProcessGrid::create(tp * dp * pp, tp, pp, dp);
  EXPECT_EQ(grid, ProcessGrid::create(tp * dp * pp, tp, pp, -1));  // inference gives the same layout
  ASSERT_EQ(grid.world_size(), tp * dp * pp);
  for (int r = 0; r < grid.world_size(); ++r) {
    const GridCoords c = grid.coords_of(r);
    EXPECT_EQ(grid.rank_of(c), r);
    EXPECT_EQ(r, c.tp_rank + tp * (c.dp_rank + dp * c.pp_rank));  // docs/architecture.md, written out independently
    // Members differ from r only in the family's coordinate, in increasing order of it.
    const auto tpg = grid.tp_group(r);
    for (int i = 0; i < tp; ++i) EXPECT_EQ(grid.coords_of(tpg[static_cast<std::size_t>(i)]), (GridCoords{i, c.dp_rank, c.pp_rank}));
    const auto dpg = grid.dp_group(r);
    for (int i = 0; i < dp; ++i) EXPECT_EQ(grid.coords_of(dpg[static_cast<std::size_t>(i)]), (GridCoords{c.tp_rank, i, c.pp_rank}));
    const auto ppg = grid.pp_group(r);
    for (int i = 0; i < pp; ++i) EXPECT_EQ(grid.coords_of(ppg[static_cast<std::size_t>(i)]), (GridCoords{c.tp_rank, c.dp_rank, i}));
    // tp peers are neighbours: a contiguous run of ranks.
    EXPECT_EQ(tpg.back() - tpg.front(), tp - 1);
    // Embedding group: first and last stage of the replica, or nothing for middle stages.
    const auto emb = grid.embedding_group(r);
    if (c.pp_rank == 0 || c.pp_rank == pp - 1) {
      ASSERT_EQ(emb.size(), pp > 1 ? 2u : 1u);
      EXPECT_EQ(emb.front(), ppg.front());
      EXPECT_EQ(emb.back(), ppg.back());
      EXPECT_TRUE(std::find(emb.begin(), emb.end(), r) != emb.end());
    } else {
      EXPECT_TRUE(emb.empty());
      EXPECT_FALSE(grid.in_embedding_group(r));
    }
  }
  expect_partition(grid, grid.tp_groups(), [&](int r) { return grid.tp_group(r); }, tp, "tp");
  expect_partition(grid, grid.dp_groups(), [&](int r) { return grid.dp_group(r); }, dp, "dp");
  expect_partition(grid, grid.pp_groups(), [&](int r) { return grid.pp_group(r); }, pp, "pp");
  const auto emb_groups = grid.embedding_groups();
  EXPECT_EQ(static_cast<int>(emb_groups.size()), tp * dp);
  std::set<int> emb_members;
  for (const auto& g : emb_groups) {
    for (int r : g) EXPECT_TRUE(emb_members.insert(r).second) << "rank " << r << " in two embedding groups";
  }
  EXPECT_EQ(static_cast<int>(emb_members.size()), tp * dp * std::min(pp, 2));
}

INSTANTIATE_TEST_SUITE_P(Many, GridLayouts,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return "tp" + std::to_string(std::get<0>(info.param)) + "_dp" +
                                  std::to_string(std::get<1>(info.param)) + "_pp" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(Grid, KnownLayoutTp2Dp3Pp2) {
  const ProcessGrid grid = ProcessGrid::create(12, 2, 2);
  EXPECT_EQ(grid.dp_size(), 3);
  EXPECT_EQ(grid.str(), "tp=2 dp=3 pp=2 (world 12)");
  EXPECT_EQ(grid.coords_of(7), (GridCoords{1, 0, 1}));
  EXPECT_EQ(grid.tp_group(7), (std::vector<int>{6, 7}));
  EXPECT_EQ(grid.dp_group(7), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(grid.pp_group(7), (std::vector<int>{1, 7}));
  EXPECT_EQ(grid.embedding_group(7), (std::vector<int>{1, 7}));
}

std::string error_of(int world, int tp, int pp, int dp) {
  try {
    ProcessGrid::create(world, tp, pp, dp);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Grid, ErrorsNameTheNumbers) {
  EXPECT_NE(error_of(12, 2, 4, -1).find("world size 12 is not divisible by tp(2) × pp(4) = 8"), std::string::npos)
      << error_of(12, 2, 4, -1);
  EXPECT_NE(error_of(4, 2, 4, -1).find("world size 4 is smaller than tp(2) × pp(4) = 8: data_parallel_size would be "
                                       "inferred as 0"),
            std::string::npos)
      << error_of(4, 2, 4, -1);
  EXPECT_NE(error_of(12, 2, 4, 2).find("world size 12 does not match tp(2) × dp(2) × pp(4) = 16"), std::string::npos)
      << error_of(12, 2, 4, 2);
  EXPECT_NE(error_of(8, 0, 1, -1).find("parallel.tensor_model_parallel_size must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of(8, 1, -2, -1).find("parallel.pipeline_model_parallel_size"), std::string::npos);
  EXPECT_NE(error_of(8, 1, 1, 0).find("parallel.data_parallel_size must be -1 (inferred) or at least 1, got 0"),
            std::string::npos);
  const ProcessGrid grid = ProcessGrid::create(8, 2, 2);
  EXPECT_THROW(grid.coords_of(8), Error);
  EXPECT_THROW(grid.rank_of({2, 0, 0}), Error);
}

// Context parallelism: tp × cp × dp × pp with tp fastest, then cp (Megatron's order, docs/multi-rank.md).
TEST(Grid, ContextParallelRankOrderAndGroups) {
  for (const auto& [tp, cp, dp, pp] : std::vector<std::array<int, 4>>{{2, 2, 2, 1}, {1, 4, 1, 2}, {2, 2, 1, 2}, {1, 2, 3, 1}}) {
    const int world = tp * cp * dp * pp;
    const ProcessGrid grid = ProcessGrid::create(world, tp, pp, -1, cp);
    SCOPED_TRACE(grid.str());
    ASSERT_EQ(grid.cp_size(), cp);
    ASSERT_EQ(grid.dp_size(), dp);
    for (int r = 0; r < world; ++r) {
      const GridCoords c = grid.coords_of(r);
      EXPECT_EQ(grid.rank_of(c), r);
      EXPECT_EQ(r, c.tp_rank + tp * (c.cp_rank + cp * (c.dp_rank + dp * c.pp_rank)));  // written out independently
      const auto cpg = grid.cp_group(r);
      ASSERT_EQ(cpg.size(), static_cast<std::size_t>(cp));
      for (int i = 0; i < cp; ++i) {
        GridCoords want = c;
        want.cp_rank = i;
        EXPECT_EQ(grid.coords_of(cpg[static_cast<std::size_t>(i)]), want);
      }
      // dp × cp: the ranks holding the same parameters, cp fastest.
      const auto both = grid.dp_cp_group(r);
      ASSERT_EQ(both.size(), static_cast<std::size_t>(cp * dp));
      for (std::size_t i = 0; i < both.size(); ++i) {
        const GridCoords m = grid.coords_of(both[i]);
        EXPECT_EQ(m.tp_rank, c.tp_rank);
        EXPECT_EQ(m.pp_rank, c.pp_rank);
        EXPECT_EQ(m.cp_rank + cp * m.dp_rank, static_cast<int>(i));
      }
      // tp peers stay neighbours.
      const auto tpg = grid.tp_group(r);
      EXPECT_EQ(tpg.back() - tpg.front(), tp - 1);
    }
    expect_partition(grid, grid.cp_groups(), [&](int r) { return grid.cp_group(r); }, cp, "cp");
    expect_partition(grid, grid.dp_cp_groups(), [&](int r) { return grid.dp_cp_group(r); }, cp * dp, "dp_cp");
    expect_partition(grid, grid.dp_groups(), [&](int r) { return grid.dp_group(r); }, dp, "dp");
    expect_partition(grid, grid.tp_groups(), [&](int r) { return grid.tp_group(r); }, tp, "tp");
    expect_partition(grid, grid.pp_groups(), [&](int r) { return grid.pp_group(r); }, pp, "pp");
  }
  EXPECT_THROW(ProcessGrid::create(6, 1, 1, -1, 4), Error);
}

// Expert parallelism (Megatron's folding): ep splits the dp × cp group, ep fastest inside it; the ep group and
// the expert-dp group partition every dp × cp group; ep does not change the world or any other group.
TEST(Grid, ExpertParallelFoldsOutOfDpTimesCp) {
  for (const auto& [tp, cp, dp, pp, ep] : std::vector<std::array<int, 5>>{
           {1, 1, 2, 1, 2}, {1, 1, 4, 1, 4}, {1, 1, 4, 1, 2}, {2, 1, 2, 2, 2}, {1, 2, 2, 1, 4}, {2, 2, 3, 1, 2}}) {
    const int world = tp * cp * dp * pp;
    const ProcessGrid grid = ProcessGrid::create(world, tp, pp, -1, cp, ep);
    SCOPED_TRACE(grid.str());
    ASSERT_EQ(grid.ep_size(), ep);
    ASSERT_EQ(grid.expert_dp_size(), dp * cp / ep);
    EXPECT_NE(grid.str().find("ep=" + std::to_string(ep)), std::string::npos);
    for (int r = 0; r < world; ++r) {
      const GridCoords c = grid.coords_of(r);
      const int i = c.cp_rank + cp * c.dp_rank;  // index in the dp × cp group, written out independently
      EXPECT_EQ(c.ep_rank, i % ep);
      EXPECT_EQ(c.expert_dp_rank, i / ep);
      const auto epg = grid.ep_group(r);
      ASSERT_EQ(epg.size(), static_cast<std::size_t>(ep));
      for (int e = 0; e < ep; ++e) {
        const GridCoords m = grid.coords_of(epg[static_cast<std::size_t>(e)]);
        EXPECT_EQ(m.tp_rank, c.tp_rank);
        EXPECT_EQ(m.pp_rank, c.pp_rank);
        EXPECT_EQ(m.ep_rank, e);
        EXPECT_EQ(m.expert_dp_rank, c.expert_dp_rank);
      }
      const auto edp = grid.expert_dp_group(r);
      ASSERT_EQ(edp.size(), static_cast<std::size_t>(dp * cp / ep));
      for (std::size_t a = 0; a < edp.size(); ++a) {
        const GridCoords m = grid.coords_of(edp[a]);
        EXPECT_EQ(m.tp_rank, c.tp_rank);
        EXPECT_EQ(m.pp_rank, c.pp_rank);
        EXPECT_EQ(m.ep_rank, c.ep_rank);
        EXPECT_EQ(m.expert_dp_rank, static_cast<int>(a));
      }
    }
    expect_partition(grid, grid.ep_groups(), [&](int r) { return grid.ep_group(r); }, ep, "ep");
    expect_partition(grid, grid.expert_dp_groups(), [&](int r) { return grid.expert_dp_group(r); }, dp * cp / ep,
                     "expert_dp");
    expect_partition(grid, grid.dp_cp_groups(), [&](int r) { return grid.dp_cp_group(r); }, cp * dp, "dp_cp");
  }
  // ep must divide dp × cp: the message names the key and the numbers.
  try {
    (void)ProcessGrid::create(6, 1, 1, -1, 1, 4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("parallel.expert_model_parallel_size 4"), std::string::npos) << message;
    EXPECT_NE(message.find("= 6 ranks"), std::string::npos) << message;
  }
  EXPECT_THROW(ProcessGrid::create(4, 1, 1, -1, 1, 0), Error);
}

// ep × tp (expert tensor parallelism), written out by hand: tp 2, dp 2, ep 2 on 4 ranks. tp stays fastest; the ep
// groups pair the ranks of one tp rank ({0, 2}, {1, 3}: the all-to-alls); the tp groups ({0, 1}, {2, 3}) are the two
// halves of one ep rank's experts; ep takes all of dp, so each expert-dp group is one rank.
TEST(Grid, ExpertParallelTimesTensorParallelByHand) {
  const ProcessGrid grid = ProcessGrid::create(4, 2, 1, -1, 1, 2);
  EXPECT_EQ(grid.str(), "tp=2 dp=2 ep=2 pp=1 (world 4)");
  EXPECT_EQ(grid.ep_groups(), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(grid.tp_groups(), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(grid.expert_dp_group(3), (std::vector<int>{3}));
  EXPECT_EQ(grid.coords_of(2).ep_rank, 1);
  EXPECT_EQ(grid.coords_of(3).ep_rank, 1);
  EXPECT_EQ(grid.coords_of(1).ep_rank, 0);
}

}  // namespace
}  // namespace cleave::comm::grid_test
