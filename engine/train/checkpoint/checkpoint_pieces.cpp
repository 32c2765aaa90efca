// local_pieces (checkpoint_pieces.hpp).
#include "engine/train/checkpoint/checkpoint_pieces.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/collectives.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {

Shape logical_shape(const layers::Param& p) {
  return p.shard.dim < 0 && p.value.defined() ? p.value.shape() : p.shard.logical;
}

std::int64_t local_numel(const layers::Param& p) {
  if (p.value.defined()) return p.value.numel();  // ZeRO-3 keeps none: the spec says
  return p.shard.dim < 0 ? p.shard.logical.numel() : layers::shard_shape(p.shard).numel();
}

std::vector<LocalPiece> local_pieces(const RankSetup& setup, const RankModel& model, StepTail& tail) {
  std::map<std::string, const layers::Param*> by_name;
  for (const auto& p : model.params()) by_name[p->name] = p.get();
  const int tp_rank = setup.coords.tp_rank;
  const auto writes_copy = [&](const layers::Param& p) {
    if (!layers::counted_on_tp_rank(p.shard, tp_rank)) return false;
    return model.counts_tied_copy() || p.name != model.tied_name();
  };
  // The first replica writes: dp rank 0 and cp rank 0, or for an expert-parallel tensor (this rank's experts, held
  // alike only by the expert-dp group) expert-dp rank 0.
  const auto first_replica = [&](const layers::Param& p) {
    return p.ep_size > 1 ? setup.coords.expert_dp_rank == 0 : setup.coords.dp_rank == 0 && setup.coords.cp_rank == 0;
  };
  std::vector<LocalPiece> out;
  const optim::ShardedOptimizer* sharded =
      tail.data_parallel() != nullptr ? tail.data_parallel()->sharded_optimizer() : nullptr;
  if (tail.parameter_shards() != nullptr) {
    // ZeRO-3: this rank's segments of the master shards, like ZeRO state: no rank gathers a whole parameter.
    for (const optim::FlatShard& shard : sharded->shards()) {
      for (const optim::ShardSegment& segment : shard.segments) {
        out.push_back({segment.param->name, segment.param, shard.value.slice(segment.begin, segment.begin + segment.numel),
                       segment.param_offset, writes_copy(*segment.param)});
      }
    }
  } else {
    for (const auto& p : model.params()) {
      out.push_back({p->name, p.get(), p->value.view({p->value.numel()}), 0, first_replica(*p) && writes_copy(*p)});
    }
  }
  if (tail.optimizer() != nullptr) {
    for (auto& [name, tensor] : tail.optimizer()->state()) {
      const std::string param_name = name.substr(0, name.rfind('.'));
      const layers::Param* p = by_name.at(param_name);
      out.push_back({name, p, tensor.view({tensor.numel()}), 0, first_replica(*p) && writes_copy(*p)});
    }
  } else {
    CLEAVE_ASSERT(sharded != nullptr, "a trainer with neither an optimizer nor a ZeRO-1 sharded optimizer");
    const auto& shards = sharded->shards();
    for (std::size_t k = 0; k < sharded->state_names().size(); ++k) {
      for (std::size_t i = 0; i < shards.size(); ++i) {
        const Tensor& state = sharded->state_tensor(k, i);
        for (const optim::ShardSegment& segment : shards[i].segments) {
          out.push_back({segment.param->name + "." + sharded->state_names()[k], segment.param,
                         state.slice(segment.begin, segment.begin + segment.numel), segment.param_offset,
                         writes_copy(*segment.param)});
        }
      }
    }
  }
  return out;
}

}  // namespace cleave::train

namespace cleave::train {

RankFailure rank_failure(const std::exception& e) {
  if (dynamic_cast<const checkpoint::CheckpointDamage*>(&e) != nullptr) return {e.what(), RankFailureType::kDamage};
  if (dynamic_cast<const checkpoint::CheckpointMismatch*>(&e) != nullptr) return {e.what(), RankFailureType::kMismatch};
  if (dynamic_cast<const InputError*>(&e) != nullptr) return {e.what(), RankFailureType::kBadInput};
  return {e.what(), RankFailureType::kError};
}

void throw_if_any_rank_failed(comm::Communicator& world, const RankFailure& failure) {
  // One tag byte ('E' any other error, 'I' bad input, 'M' mismatch, 'D' damage) before the message; nothing when
  // this rank did not fail.
  const char tag = failure.type == RankFailureType::kDamage     ? 'D'
                   : failure.type == RankFailureType::kMismatch ? 'M'
                   : failure.type == RankFailureType::kBadInput ? 'I'
                                                                : 'E';
  const std::string mine = failure.message.empty() ? std::string() : tag + failure.message;
  const auto all = all_gather_values<char>(world, std::span<const char>(mine.data(), mine.size()));
  const auto first = [&all](char tag) -> std::optional<std::size_t> {
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (!all[r].empty() && all[r][0] == tag) return r;
    }
    return std::nullopt;
  };
  const std::optional<std::size_t> plain = first('E');
  const std::optional<std::size_t> input = first('I');
  const std::optional<std::size_t> mismatch = first('M');
  const std::optional<std::size_t> damage = first('D');
  if (!plain && !input && !mismatch && !damage) return;
  // Bad input stays bad input only when no failing rank saw anything else; mixed with another failure it is an error.
  const bool only_input = input && !plain && !mismatch && !damage;
  const std::optional<std::size_t> error = plain && input ? std::min(*plain, *input) : plain ? plain : input;
  const std::size_t r = error ? *error : mismatch ? *mismatch : *damage;
  const std::string message(all[r].begin() + 1, all[r].end());
  const std::string text = world.size() == 1 ? message : fmt::format("rank {}: {}", r, message);
  if (only_input) throw InputError(text);
  if (error) throw Error(text);
  if (mismatch) throw checkpoint::CheckpointMismatch(text);
  throw checkpoint::CheckpointDamage(text);
}

}  // namespace cleave::train
