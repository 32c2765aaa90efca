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
  friend bool operator==(const GridCoords&, const GridCoords&) = default;
};

class ProcessGrid {
 public:
  // Validates and resolves the layout. data_parallel_size = -1 infers dp = world / (tp × pp). Errors name
  // the numbers and the config keys (parallel.tensor_model_parallel_size, ...).
  // context_parallel_size: parallel.context_parallel_size.
  static ProcessGrid create(int world_size, int tensor_parallel_size, int pipeline_parallel_size,
                            int data_parallel_size = -1, int context_parallel_size = 1);

  int world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int tp_size() const { return tp_; }
  int cp_size() const { return cp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }

  int rank_of(const GridCoords& coords) const;  // checks the coordinates' ranges
  GridCoords coords_of(int rank) const;         // checks the rank's range

  // Members (global ranks) of the group that contains `rank`, ordered by rank within the group.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  std::vector<int> dp_cp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
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

  std::string str() const;  // "tp=2 dp=3 pp=2 (world 12)"; "tp=2 cp=2 dp=3 pp=2 (world 24)" when cp > 1
  friend bool operator==(const ProcessGrid&, const ProcessGrid&) = default;

 private:
  ProcessGrid(int tp, int dp, int pp, int cp) : tp_(tp), dp_(dp), pp_(pp), cp_(cp) {}
  int tp_ = 1;
  int dp_ = 1;
  int pp_ = 1;
  int cp_ = 1;
};

// The communicators of one rank's groups. `embedding` is null on ranks outside the embedding group; `cp` and
// `dp_cp` exist only when cp > 1 (with cp = 1 the replicas are the dp group: replicas() says which).
struct GridCommunicators {
  std::unique_ptr<Communicator> tp;
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<Communicator> pp;
  std::unique_ptr<Communicator> embedding;
  std::unique_ptr<Communicator> cp;
  std::unique_ptr<Communicator> dp_cp;
  // The ranks holding the same parameters (gradients are reduced, ZeRO shards spread over them): dp × cp.
  Communicator* replicas() const { return dp_cp ? dp_cp.get() : dp.get(); }
};

// Collective over `world` (splits in the order tp, dp, pp, embedding, then cp and dp_cp when cp > 1).
// world.size() must equal grid.world_size(); ranks are numbered as in `world`. Names: "<world>/tp", "/dp",
// "/pp", "/embedding", "/cp", "/dp_cp".
GridCommunicators build_grid_communicators(Communicator& world, const ProcessGrid& grid);

}  // namespace cleave::comm
