// Internal to engine/train: what one rank holds of every logical tensor a checkpoint stores, and which of
// those pieces it owns (writes). Shared by checkpoint_save.cpp and checkpoint_load.cpp.
//
// A logical tensor is a parameter ("<param name>") or one kind of its optimizer state
// ("<param name>.exp_avg" | ".exp_avg_sq" | ".momentum_buffer"), all f32 of the parameter's logical shape.
// A piece is a contiguous element range [offset, offset + numel) of one tensor-parallel shard of it (the
// parameter's ShardSpec), flattened: the whole shard for parameters and unsharded optimizer state, a ZeRO-1
// segment for sharded state (and, under ZeRO-3, for parameters too: a rank holds only its shards). Ownership
// (each logical element written once): parameters and unsharded state by dp rank 0, sharded state and ZeRO-3
// parameters by every dp rank (its own segments); replicated-over-tp tensors by tp rank 0
// only; a tied table split over two pp ranks by the embedding side only (the copies are equal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/shape.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/step_tail.hpp"

namespace cleave::train {

struct LocalPiece {
  std::string tensor;                    // logical name
  const layers::Param* param = nullptr;  // whose ShardSpec places the piece
  Tensor data;                           // f32, numel elements: this rank's storage (a view)
  std::int64_t offset = 0;               // first element within the flattened tp shard
  bool owned = false;                    // this rank writes it
};

// Every piece this rank holds: parameters first, then optimizer state.
std::vector<LocalPiece> local_pieces(const RankSetup& setup, const RankModel& model, StepTail& tail);

// The logical shape of `p` (its value's shape when replicated).
Shape logical_shape(const layers::Param& p);
// Elements of this rank's tensor-parallel shard of `p` (whether or not its value is held).
std::int64_t local_numel(const layers::Param& p);

}  // namespace cleave::train

namespace cleave::train {

// One rank's failure in a collective step (reading or writing a checkpoint, loading weights, checking output paths):
// its message (empty: none) and its type, which sets the process's exit code. There is no untyped form: a failure
// caught as a plain string would turn bad input into exit 1.
enum class RankFailureType {
  kError,     // any other Error
  kBadInput,  // InputError: the command line, the config or a file they name is wrong (exit 64)
  kMismatch,  // checkpoint::CheckpointMismatch: the checkpoint is intact, the run does not fit it
  kDamage,    // checkpoint::CheckpointDamage
};
struct RankFailure {
  std::string message;
  RankFailureType type = RankFailureType::kError;
};
RankFailure rank_failure(const std::exception& e);
// Collective over the world (so no rank walks on into a collective its peers never join): every rank throws
// InputError when every failing rank's failure is bad input (the ranks that failed agree: exit 64), else the lowest
// failing rank's Error when any rank's failure is another Error or bad input, else CheckpointMismatch when any rank's
// is one (another model, a refused config: an older checkpoint would not help), else CheckpointDamage, each with the
// lowest such rank's message, so every rank falls back (or stops) together, with the type that sets its exit code
// (engine/core/exit_code.hpp).
void throw_if_any_rank_failed(comm::Communicator& world, const RankFailure& failure);

}  // namespace cleave::train
