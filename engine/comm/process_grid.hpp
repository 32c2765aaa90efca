// ProcessGrid: the 4D layout of ranks (docs/architecture.md, docs/multi-rank.md), a small value type with no
// communication in it.
//
//   world = tp × cp × dp × pp,   rank = tp_rank + tp · (cp_rank + cp · (dp_rank + dp · pp_rank))
//
// Megatron's order: tensor-parallel peers are neighbours (as on a node), then context-parallel peers (they
// exchange keys and values every layer), then data-parallel replicas, then pipeline ranks. With cp = 1 this
// is the 3D layout tp × dp × pp unchanged.
// Groups: tp (same cp, dp, pp), cp (same tp, dp, pp), dp (same tp, cp, pp), dp_cp (same tp, pp: the ranks
// that hold the same parameters and reduce gradients together), pp (same tp, cp, dp), and the embedding
// group: the first and last pp rank of each (tp, cp, dp) replica, which hold the tied input embedding and
// output head (a single rank when pp = 1). Every group family partitions the world; every member list is
// sorted by rank in the group (dp_cp: cp fastest, so its index is cp_rank + cp · dp_rank).
//
//
// Expert parallelism (ep > 1, Megatron's folding): ep does not multiply the world; it splits the dp × cp group.
// With i = cp_rank + cp · dp_rank a rank's index in its dp_cp group, ep_rank = i mod ep and
// expert_dp_rank = i / ep. Groups: ep (same tp, pp, expert_dp_rank: the ranks that split one set of experts and
// exchange tokens by all-to-all), expert_dp (same tp, pp, ep_rank: the dp × cp / ep ranks holding the same
// experts, over which expert gradients are reduced). Non-expert parameters keep dp_cp. With tp > 1 (expert tensor
// parallelism) the order stays tp fastest: rank = tp_rank + tp · (i + dp · cp · pp_rank), ep_rank = i mod ep; the
// tp ranks of one ep rank are neighbours holding the same experts split over tp, and every ep group lies inside
// one tp rank (tp 2, dp 2, ep 2: ep groups {0, 2} and {1, 3}, tp groups {0, 1} and {2, 3}).
//
// build_grid_communicators() turns a grid into communicators by splitting a world communicator; it is the
// only part that communicates.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace cleave::comm {

struct GridCoords {
  int tp_rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int cp_rank = 0;
  // Derived by coords_of (rank_of and == ignore them): with i = cp_rank + cp · dp_rank, i mod ep and i / ep.
  int ep_rank = 0;
  int expert_dp_rank = 0;
  friend bool operator==(const GridCoords& a, const GridCoords& b) {
    return a.tp_rank == b.tp_rank && a.dp_rank == b.dp_rank && a.pp_rank == b.pp_rank && a.cp_rank == b.cp_rank;
  }
};

class ProcessGrid {
 public:
  // Validates and resolves the layout. data_parallel_size = -1 infers dp = world / (tp × pp). Errors name
  // the numbers and the config keys (parallel.tensor_model_parallel_size, ...).
  // context_parallel_size: parallel.context_parallel_size; expert_parallel_size:
  // parallel.expert_model_parallel_size (must divide dp × cp).
  static ProcessGrid create(int world_size, int tensor_parallel_size, int pipeline_parallel_size,
                            int data_parallel_size = -1, int context_parallel_size = 1, int expert_parallel_size = 1);

  int world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int tp_size() const { return tp_; }
  int cp_size() const { return cp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int ep_size() const { return ep_; }
  int expert_dp_size() const { return dp_ * cp_ / ep_; }

  int rank_of(const GridCoords& coords) const;  // checks the coordinates' ranges
  GridCoords coords_of(int rank) const;         // checks the rank's range

  // Members (global ranks) of the group that contains `rank`, ordered by rank within the group.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  std::vector<int> dp_cp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> ep_group(int rank) const;
  std::vector<int> expert_dp_group(int rank) const;
  // First and last pp rank of rank's (tp, cp, dp) replica; empty if `rank` is in neither stage.
  std::vector<int> embedding_group(int rank) const;
  bool in_embedding_group(int rank) const;

  // Every group of a family, indexed by the color build_grid_communicators() uses for it.
  std::vector<std::vector<int>> tp_groups() const;
  std::vector<std::vector<int>> dp_groups() const;
  std::vector<std::vector<int>> cp_groups() const;
  std::vector<std::vector<int>> dp_cp_groups() const;
  std::vector<std::vector<int>> pp_groups() const;
  std::vector<std::vector<int>> embedding_groups() const;
  std::vector<std::vector<int>> ep_groups() const;
  std::vector<std::vector<int>> expert_dp_groups() const;

  // "tp=2 dp=3 pp=2 (world 12)"; "tp=2 cp=2 dp=3 pp=2 (world 24)" when cp > 1; " ep=2" after dp when ep > 1
  std::string str() const;
  friend bool operator==(const ProcessGrid&, const ProcessGrid&) = default;

 private:
  ProcessGrid(int tp, int dp, int pp, int cp, int ep) : tp_(tp), dp_(dp), pp_(pp), cp_(cp), ep_(ep) {}
  static ProcessGrid create_without_ep(int world_size, int tp, int pp, int dp, int cp);
  // The member of rank's dp_cp group with index i there.
  int dp_cp_member(int rank, int i) const;
  int tp_ = 1;
  int dp_ = 1;
  int pp_ = 1;
  int cp_ = 1;
  int ep_ = 1;
};

// The communicators of one rank's groups. `embedding` is null on ranks outside the embedding group; `cp` and
// `dp_cp` exist only when cp > 1 (with cp = 1 the replicas are the dp group: replicas() says which); `ep` and
// `expert_dp` only when ep > 1 (expert_replicas() is replicas() otherwise).
struct GridCommunicators {
  std::unique_ptr<Communicator> tp;
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<Communicator> pp;
  std::unique_ptr<Communicator> embedding;
  std::unique_ptr<Communicator> cp;
  std::unique_ptr<Communicator> dp_cp;
  std::unique_ptr<Communicator> ep;
  std::unique_ptr<Communicator> expert_dp;
  // The ranks holding the same parameters (gradients are reduced, ZeRO shards spread over them): dp × cp.
  Communicator* replicas() const { return dp_cp ? dp_cp.get() : dp.get(); }
  // The ranks holding the same experts: dp × cp / ep (the replicas without ep).
  Communicator* expert_replicas() const { return expert_dp ? expert_dp.get() : replicas(); }
};

// Collective over `world` (splits in the order tp, dp, pp, embedding, then cp and dp_cp when cp > 1, then ep
// and expert_dp when ep > 1).
// world.size() must equal grid.world_size(); ranks are numbered as in `world`. Names: "<world>/tp", "/dp",
// "/pp", "/embedding", "/cp", "/dp_cp", "/ep", "/expert_dp".
GridCommunicators build_grid_communicators(Communicator& world, const ProcessGrid& grid);

}  // namespace cleave::comm
