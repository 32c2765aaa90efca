// gather_parameters (parameter_gather.hpp).
#include "engine/train/parameter_gather.hpp"
#include "kernels/ops/ops.hpp"

#include "engine/train/collectives.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {

namespace {

// name -> (tp rank, ep rank) -> the lowest world rank of replica 0 (expert-dp rank 0) holding it: every rank
// publishes its parameters' names (collective over `world`).
using Holders = std::map<std::string, std::map<std::pair<int, int>, int>>;

Holders holders_of(comm::Communicator& world, const comm::ProcessGrid& grid, const RankModel& model) {
  std::string mine;
  for (const auto& p : model.params()) mine += p->name + "\n";
  const auto texts = all_gather_values<char>(world, std::span<const char>(mine.data(), mine.size()));
  Holders holders;
  for (int r = 0; r < world.size(); ++r) {
    const comm::GridCoords c = grid.coords_of(r);
    if (c.expert_dp_rank != 0) continue;  // ep 1: dp rank 0 and cp rank 0
    std::string line;
    for (char ch : texts[static_cast<std::size_t>(r)]) {
      if (ch == '\n') {
        holders[line].try_emplace(std::pair{c.tp_rank, c.ep_rank}, r);
        line.clear();
      } else {
        line += ch;
      }
    }
  }
  return holders;
}

// A shard's description as broadcast: numel, dim, parts, index, groups, rank, logical dims, ep_parts, ep_index.
constexpr int kMeta = 4 + Shape::kMaxDims + 2 + 2;
constexpr int kEp = 6 + Shape::kMaxDims;

Tensor shard_meta(const layers::Param* local) {
  Tensor meta = Tensor::zeros({kMeta}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  if (local == nullptr) return meta;
  std::int64_t* m = meta.data<std::int64_t>();
  const layers::ShardSpec& spec = local->shard;
  m[0] = local->value.numel();
  m[1] = spec.dim;
  m[2] = spec.parts;
  m[3] = spec.index;
  m[4] = spec.groups;
  m[5] = spec.logical.rank();
  for (int d = 0; d < spec.logical.rank(); ++d) m[6 + d] = spec.logical[d];
  m[kEp] = spec.ep_parts;
  m[kEp + 1] = spec.ep_index;
  return meta;
}

layers::ShardSpec shard_spec_of(const std::int64_t* m) {
  layers::ShardSpec spec;
  spec.dim = static_cast<int>(m[1]);
  spec.parts = static_cast<int>(m[2]);
  spec.index = static_cast<int>(m[3]);
  spec.groups = static_cast<int>(m[4]);
  spec.logical = Shape(std::span<const std::int64_t>(m + 6, static_cast<std::size_t>(m[5])));
  spec.ep_parts = static_cast<int>(m[kEp]);
  spec.ep_index = static_cast<int>(m[kEp + 1]);
  return spec;
}

// The host buffer a shard of `numel` values is broadcast through: this rank's parameter (read back to the host first
// on a GPU, one tensor at a time), or room for the holder's.
Tensor shard_values(const layers::Context& context, const layers::Param* local, std::int64_t numel) {
  if (local == nullptr) return Tensor::empty({numel}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
  const Tensor flat = local->value.view({local->value.numel()});
  return local->value.device().is_cpu() ? flat : ops::to_host(context, flat);
}

std::shared_ptr<layers::Param> param_named(const RankModel& model, const std::string& name) {
  std::shared_ptr<layers::Param> found;
  for (const auto& p : model.params()) {
    if (p->name == name) found = p;
  }
  return found;
}

}  // namespace

std::map<std::string, std::vector<float>> gather_parameters(RankSetup& s, const RankModel& model) {
  // For each name, replica 0 (dp 0) supplies it: per tp rank the lowest world rank holding it broadcasts its shard
  // and its ShardSpec, and every rank places the shards into the logical tensor. Under expert parallelism replica 0
  // is expert-dp rank 0, whose ep ranks hold one slice of the experts each: each (tp, ep) rank's shard is placed (a
  // non-expert tensor is then placed ep times, the same values).
  const Holders holders = holders_of(s.world, s.grid, model);
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, by_tp] : holders) {
    std::vector<float> logical;
    for (const auto& [tp_ep, rank] : by_tp) {
      const int tp_rank = tp_ep.first;
      const std::shared_ptr<layers::Param> local = rank == s.world.rank() ? param_named(model, name) : nullptr;
      Tensor meta = shard_meta(local.get());
      s.world.broadcast(meta, rank)->wait();
      const std::int64_t* m = meta.data<std::int64_t>();
      if (m[1] < 0 && tp_rank != 0) continue;  // replicated: tp rank 0's copy is the logical tensor
      Tensor values = shard_values(s.context, local.get(), m[0]);
      s.world.broadcast(values, rank)->wait();
      if (m[1] < 0) {
        logical = values.to_floats();
        continue;
      }
      layers::place_shard(logical, values.to_floats(), shard_spec_of(m));
    }
    out[name] = std::move(logical);
  }
  return out;
}

}  // namespace cleave::train
