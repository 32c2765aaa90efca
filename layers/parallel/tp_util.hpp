// Helpers shared by the tensor-parallel layers: checking a layer's tp coordinates, finding the tp
// communicator in the Context, and the blocking all-reduce the Megatron operators need.
//
// Invariant: with tp_size 1 a parallel layer never touches ctx.tp_comm (it may be null) and behaves as its
// single-rank counterpart; with tp_size > 1 ctx.tp_comm must be the tp group this layer was built for
// (size tp_size, this process at rank tp_rank), else Error before any communication is issued.
#pragma once

#include <string_view>

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

}  // namespace cleave::layers
