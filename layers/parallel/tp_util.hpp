// Helpers shared by the tensor-parallel layers: checking a layer's tp coordinates, finding the tp
// communicator in the Context, the blocking all-reduce the Megatron operators need, and the sequence
// collectives of sequence parallelism (Context::sequence_parallel).
//
// Sequence-shard layout: activations are [B, T, ...] (batch, sequence, features); a sequence shard is
// [B, T / tp, ...] with tp rank r holding tokens [r·T/tp, (r+1)·T/tp) of EVERY sample. For B > 1 that shard
// is not a contiguous block of the full tensor, so the collectives run per batch entry: sample b's full
// [T, ...] is one contiguous tensor whose tp blocks are exactly the ranks' [T/tp, ...] shards of it, so
// all_gather(local[b] -> full[b]) and reduce_scatter(full[b] -> local[b]) need no packing. The B collectives
// are issued together and then waited for (B messages of 1/B the size instead of one: no copy, no extra
// buffer; a pack kernel would fuse them for large B).
//
// Invariant: with tp_size 1 a parallel layer never touches ctx.tp_comm (it may be null) and behaves as its
// single-rank counterpart; with tp_size > 1 ctx.tp_comm must be the tp group this layer was built for
// (size tp_size, this process at rank tp_rank), else Error before any communication is issued.
#pragma once

#include <string_view>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/tensor.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

// Throws Error unless tp_size >= 1 and 0 <= tp_rank < tp_size.
void check_tp_coordinates(int tp_size, int tp_rank, std::string_view who);

// ctx.tp_comm checked against (tp_size, tp_rank); nullptr when tp_size == 1.
comm::Communicator* tp_group(const Context& ctx, int tp_size, int tp_rank, std::string_view who);

// In place over the tp group on ctx.stream, blocking until done; a no-op when tp_size == 1.
void tp_all_reduce(const Tensor& tensor, comm::ReduceOp op, const Context& ctx, int tp_size, int tp_rank,
                   std::string_view who);

// Whether a tp part converts between sequence shards and full sequences: ctx.sequence_parallel and tp_size > 1.
bool sequence_parallel(const Context& ctx, int tp_size);

// Sequence shards -> full sequences: local [B, T/tp, ...] -> new activation [B, T, ...] (Megatron's all-gather
// to the tensor-parallel region), blocking. The adjoint of sequence_reduce_scatter.
Tensor sequence_all_gather(const Tensor& local, const Context& ctx, int tp_size, int tp_rank, std::string_view who);

// Partial full sequences -> summed sequence shards: full [B, T, ...] (this rank's partial sums) -> new
// activation [B, T/tp, ...] holding the sum over the tp group of this rank's tokens, blocking. Throws Error
// naming model.seq_len unless tp divides T.
Tensor sequence_reduce_scatter(const Tensor& full, const Context& ctx, int tp_size, int tp_rank,
                               std::string_view who);

// Under sequence parallelism every replicated parameter (ShardSpec dim -1: norms, row-parallel biases, the
// position table) gets on each tp rank only its own tokens' share of the gradient. This sums the grads of the
// replicated params in `params` over ctx.tp_comm (all issued, then waited for); sharded params are skipped.
// Called once per parameter per step, after its last micro-batch's weight gradient and before any
// data-parallel reduction (pipeline/stage_module.hpp), so every replicated gradient is summed exactly once.
void sum_replicated_grads_over_tp(const std::vector<Param*>& params, const Context& ctx);

}  // namespace cleave::layers
