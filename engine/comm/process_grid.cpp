// ProcessGrid arithmetic and the split-based communicator factory (process_grid.hpp).
#include "engine/comm/process_grid.hpp"

#include "engine/core/error.hpp"

namespace cleave::comm {

ProcessGrid ProcessGrid::create(int world_size, int tp, int pp, int dp, int cp, int ep) {
  CLEAVE_CHECK(ep >= 1, "parallel.expert_model_parallel_size must be at least 1, got {}", ep);
  ProcessGrid grid = create_without_ep(world_size, tp, pp, dp, cp);
  CLEAVE_CHECK(grid.dp_ * grid.cp_ % ep == 0,
               "parallel.expert_model_parallel_size {} does not divide the dp × cp = {} × {} = {} ranks it is taken "
               "from (process grid {})",
               ep, grid.dp_, grid.cp_, grid.dp_ * grid.cp_, grid.str());
  grid.ep_ = ep;
  return grid;
}

ProcessGrid ProcessGrid::create_without_ep(int world_size, int tp, int pp, int dp, int cp) {
  CLEAVE_CHECK(world_size >= 1, "process grid: world size must be at least 1, got {}", world_size);
  CLEAVE_CHECK(tp >= 1, "parallel.tensor_model_parallel_size must be at least 1, got {}", tp);
  CLEAVE_CHECK(pp >= 1, "parallel.pipeline_model_parallel_size must be at least 1, got {}", pp);
  CLEAVE_CHECK(dp == -1 || dp >= 1, "parallel.data_parallel_size must be -1 (inferred) or at least 1, got {}", dp);
  CLEAVE_CHECK(cp >= 1, "parallel.context_parallel_size must be at least 1, got {}", cp);
  if (cp > 1) {
    const long long model = static_cast<long long>(tp) * cp * pp;
    CLEAVE_CHECK(world_size % model == 0 && (dp == -1 || model * dp == world_size),
                 "world size {} does not divide into tp({}) × cp({}) × pp({}) = {}{}; launch a multiple of {} ranks",
                 world_size, tp, cp, pp, model, dp == -1 ? std::string() : fmt::format(" × dp({})", dp), model);
    return ProcessGrid(tp, static_cast<int>(world_size / model), pp, cp, 1);
  }
  const long long model = static_cast<long long>(tp) * pp;
  if (dp == -1) {
    CLEAVE_CHECK(world_size >= model,
                 "world size {} is smaller than tp({}) × pp({}) = {}: data_parallel_size would be inferred as 0; "
                 "launch at least {} ranks or lower parallel.tensor_model_parallel_size / "
                 "parallel.pipeline_model_parallel_size",
                 world_size, tp, pp, model, model);
    CLEAVE_CHECK(world_size % model == 0,
                 "world size {} is not divisible by tp({}) × pp({}) = {}, so data_parallel_size cannot be inferred",
                 world_size, tp, pp, model);
    dp = static_cast<int>(world_size / model);
  } else {
    CLEAVE_CHECK(model * dp == world_size,
                 "world size {} does not match tp({}) × dp({}) × pp({}) = {} (parallel.data_parallel_size = {}; set "
                 "it to -1 to infer it from the world size)",
                 world_size, tp, dp, pp, model * dp, dp);
  }
  return ProcessGrid(tp, dp, pp, 1, 1);
}

int ProcessGrid::rank_of(const GridCoords& c) const {
  CLEAVE_CHECK(c.tp_rank >= 0 && c.tp_rank < tp_ && c.dp_rank >= 0 && c.dp_rank < dp_ && c.pp_rank >= 0 &&
                   c.pp_rank < pp_ && c.cp_rank >= 0 && c.cp_rank < cp_,
               "process grid {}: coordinates (tp {}, cp {}, dp {}, pp {}) out of range", str(), c.tp_rank, c.cp_rank,
               c.dp_rank, c.pp_rank);
  return c.tp_rank + tp_ * (c.cp_rank + cp_ * (c.dp_rank + dp_ * c.pp_rank));
}

GridCoords ProcessGrid::coords_of(int rank) const {
  CLEAVE_CHECK(rank >= 0 && rank < world_size(), "process grid {}: rank {} is not in 0..{}", str(), rank,
               world_size() - 1);
  GridCoords c;
  c.tp_rank = rank % tp_;
  c.cp_rank = (rank / tp_) % cp_;
  c.dp_rank = (rank / (tp_ * cp_)) % dp_;
  c.pp_rank = rank / (tp_ * cp_ * dp_);
  const int i = c.cp_rank + cp_ * c.dp_rank;
  c.ep_rank = i % ep_;
  c.expert_dp_rank = i / ep_;
  return c;
}

std::vector<int> ProcessGrid::tp_group(int rank) const {
  GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (c.tp_rank = 0; c.tp_rank < tp_; ++c.tp_rank) out.push_back(rank_of(c));
  return out;
}

std::vector<int> ProcessGrid::dp_group(int rank) const {
  GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (c.dp_rank = 0; c.dp_rank < dp_; ++c.dp_rank) out.push_back(rank_of(c));
  return out;
}

std::vector<int> ProcessGrid::cp_group(int rank) const {
  GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (c.cp_rank = 0; c.cp_rank < cp_; ++c.cp_rank) out.push_back(rank_of(c));
  return out;
}

std::vector<int> ProcessGrid::dp_cp_group(int rank) const {
  GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (c.dp_rank = 0; c.dp_rank < dp_; ++c.dp_rank) {
    for (c.cp_rank = 0; c.cp_rank < cp_; ++c.cp_rank) out.push_back(rank_of(c));
  }
  return out;
}

std::vector<int> ProcessGrid::pp_group(int rank) const {
  GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (c.pp_rank = 0; c.pp_rank < pp_; ++c.pp_rank) out.push_back(rank_of(c));
  return out;
}

int ProcessGrid::dp_cp_member(int rank, int i) const {
  GridCoords c = coords_of(rank);
  c.cp_rank = i % cp_;
  c.dp_rank = i / cp_;
  return rank_of(c);
}

std::vector<int> ProcessGrid::ep_group(int rank) const {
  const GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (int e = 0; e < ep_; ++e) out.push_back(dp_cp_member(rank, c.expert_dp_rank * ep_ + e));
  return out;
}

std::vector<int> ProcessGrid::expert_dp_group(int rank) const {
  const GridCoords c = coords_of(rank);
  std::vector<int> out;
  for (int a = 0; a < expert_dp_size(); ++a) out.push_back(dp_cp_member(rank, a * ep_ + c.ep_rank));
  return out;
}

bool ProcessGrid::in_embedding_group(int rank) const {
  const GridCoords c = coords_of(rank);
  return c.pp_rank == 0 || c.pp_rank == pp_ - 1;
}

std::vector<int> ProcessGrid::embedding_group(int rank) const {
  if (!in_embedding_group(rank)) return {};
  GridCoords c = coords_of(rank);
  c.pp_rank = 0;
  std::vector<int> out{rank_of(c)};
  if (pp_ > 1) {
    c.pp_rank = pp_ - 1;
    out.push_back(rank_of(c));
  }
  return out;
}

// Each family's groups in the order of their split colors (build_grid_communicators): enumerated by the
// coordinates the family does not span, in rank order (tp fastest, then cp, dp, pp).
std::vector<std::vector<int>> ProcessGrid::tp_groups() const {
  std::vector<std::vector<int>> out;
  for (int pp = 0; pp < pp_; ++pp) {
    for (int dp = 0; dp < dp_; ++dp) {
      for (int cp = 0; cp < cp_; ++cp) out.push_back(tp_group(rank_of({0, dp, pp, cp})));
    }
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::dp_groups() const {
  std::vector<std::vector<int>> out;
  for (int pp = 0; pp < pp_; ++pp) {
    for (int cp = 0; cp < cp_; ++cp) {
      for (int tp = 0; tp < tp_; ++tp) out.push_back(dp_group(rank_of({tp, 0, pp, cp})));
    }
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::cp_groups() const {
  std::vector<std::vector<int>> out;
  for (int pp = 0; pp < pp_; ++pp) {
    for (int dp = 0; dp < dp_; ++dp) {
      for (int tp = 0; tp < tp_; ++tp) out.push_back(cp_group(rank_of({tp, dp, pp, 0})));
    }
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::dp_cp_groups() const {
  std::vector<std::vector<int>> out;
  for (int pp = 0; pp < pp_; ++pp) {
    for (int tp = 0; tp < tp_; ++tp) out.push_back(dp_cp_group(rank_of({tp, 0, pp, 0})));
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::pp_groups() const {
  std::vector<std::vector<int>> out;
  for (int dp = 0; dp < dp_; ++dp) {
    for (int cp = 0; cp < cp_; ++cp) {
      for (int tp = 0; tp < tp_; ++tp) out.push_back(pp_group(rank_of({tp, dp, 0, cp})));
    }
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (int dp = 0; dp < dp_; ++dp) {
    for (int cp = 0; cp < cp_; ++cp) {
      for (int tp = 0; tp < tp_; ++tp) out.push_back(embedding_group(rank_of({tp, dp, 0, cp})));
    }
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::ep_groups() const {
  std::vector<std::vector<int>> out;
  for (int pp = 0; pp < pp_; ++pp) {
    for (int tp = 0; tp < tp_; ++tp) {
      for (int a = 0; a < expert_dp_size(); ++a) out.push_back(ep_group(dp_cp_member(rank_of({tp, 0, pp, 0}), a * ep_)));
    }
  }
  return out;
}

std::vector<std::vector<int>> ProcessGrid::expert_dp_groups() const {
  std::vector<std::vector<int>> out;
  for (int pp = 0; pp < pp_; ++pp) {
    for (int tp = 0; tp < tp_; ++tp) {
      for (int e = 0; e < ep_; ++e) out.push_back(expert_dp_group(dp_cp_member(rank_of({tp, 0, pp, 0}), e)));
    }
  }
  return out;
}

std::string ProcessGrid::str() const {
  const std::string ep = ep_ > 1 ? fmt::format(" ep={}", ep_) : std::string();
  if (cp_ > 1) return fmt::format("tp={} cp={} dp={}{} pp={} (world {})", tp_, cp_, dp_, ep, pp_, world_size());
  return fmt::format("tp={} dp={}{} pp={} (world {})", tp_, dp_, ep, pp_, world_size());
}

GridCommunicators build_grid_communicators(Communicator& world, const ProcessGrid& grid) {
  CLEAVE_CHECK(world.size() == grid.world_size(), "process grid {} built on comm '{}' of {} ranks", grid.str(),
               world.name(), world.size());
  const int rank = world.rank();
  const GridCoords c = grid.coords_of(rank);
  const int tp = grid.tp_size();
  const int dp = grid.dp_size();
  const int cp = grid.cp_size();
  GridCommunicators out;
  // Colors are the group's index in tp_groups() / dp_groups() / ...; keys are the rank within the group.
  out.tp = world.split(c.cp_rank + cp * (c.dp_rank + dp * c.pp_rank), c.tp_rank, "tp");
  out.dp = world.split(c.tp_rank + tp * (c.cp_rank + cp * c.pp_rank), c.dp_rank, "dp");
  out.pp = world.split(c.tp_rank + tp * (c.cp_rank + cp * c.dp_rank), c.pp_rank, "pp");
  out.embedding = world.split(grid.in_embedding_group(rank) ? c.tp_rank + tp * (c.cp_rank + cp * c.dp_rank) : -1,
                              c.pp_rank, "embedding");
  if (cp > 1) {
    out.cp = world.split(c.tp_rank + tp * (c.dp_rank + dp * c.pp_rank), c.cp_rank, "cp");
    out.dp_cp = world.split(c.tp_rank + tp * c.pp_rank, c.cp_rank + cp * c.dp_rank, "dp_cp");
  }
  const int ep = grid.ep_size();
  if (ep > 1) {  // colors: the group's index in ep_groups() / expert_dp_groups()
    out.ep = world.split(c.expert_dp_rank + grid.expert_dp_size() * (c.tp_rank + tp * c.pp_rank), c.ep_rank, "ep");
    out.expert_dp = world.split(c.ep_rank + ep * (c.tp_rank + tp * c.pp_rank), c.expert_dp_rank, "expert_dp");
  }
  return out;
}

}  // namespace cleave::comm
