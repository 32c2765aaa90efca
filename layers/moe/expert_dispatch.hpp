// Expert parallelism's token movement (parallel.expert_model_parallel_size = ep > 1; docs/multi-rank.md#expert-
// parallelism): the dispatch of routed rows to the ranks holding their experts and the return of what the experts
// computed, over the ep group (layers::Context::ep_comm) through the communicator's all_to_all_v. No MPI, NCCL or
// CUDA here: the rows are device tensors the communicator moves, the counts host integers exchanged first.
//
// Layout. Ep rank q holds experts [q · El, (q + 1) · El), El = E / ep. A rank's routed rows [R, D] are grouped by
// expert, expert 0 first (router.hpp), so the rows bound for rank q are one contiguous block: no permutation is
// needed beyond the routing's gather (moe_gather). A rank receives, in source-rank order, each source's block,
// itself grouped by local expert: recv_counts[p · El + e] rows of source p for local expert e. Sending back
// (combine) is the inverse: the expert outputs return into exactly the sender's routed-row layout, so the
// combine that follows (moe_combine: per token, its k slots in their fixed order, f32 accumulation) is ep 1's.
//
// Invariants: the plan is a pure function of every ep rank's routing counts (all ranks agree on it); every ep
// rank calls plan, dispatch and combine for the same micro-batches in the same order (they run the same schedule),
// as collectives require; blocks of 0 rows are normal (a rank that receives nothing gets [0, D] tensors and
// skips its GEMMs).
//
// For a benchmark's oracle: DispatchPlan::send_rows / recv_rows are the rows this rank sends to / receives from
// each ep rank in one all-to-all (dispatch and combine move the same counts in opposite directions); bytes =
// rows × D × the activation dtype's size. The run records them per MoE block per step in the router log
// (router_log.hpp: BlockRouting::sent_rows, sent_bytes) and the step metrics.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "layers/layer.hpp"

namespace cleave::layers {

struct DispatchPlan {
  int ep_size = 1;
  int ep_rank = 0;
  std::int64_t local_experts = 0;         // El
  std::vector<std::int64_t> send_rows;    // [ep] routed rows to each ep rank
  std::vector<std::int64_t> recv_rows;    // [ep] rows from each ep rank
  std::vector<std::int64_t> recv_counts;  // [ep · El] rows from source p for local expert e, p-major

  std::int64_t received() const;  // Σ recv_rows
  // Source p's counts per local expert (El entries): the grouped GEMMs' groups for its block.
  std::span<const std::int64_t> counts_from(int p) const;
  // First row of source p's block in the received rows.
  std::int64_t first_row_from(int p) const;
};

// The plan of one micro-batch from this rank's routing counts [E] (tokens per expert, routed-row order):
// exchanges the per-expert counts over ctx.ep_comm (blocking). Collective over the ep group.
DispatchPlan plan_dispatch(std::span<const std::int64_t> counts, Context& ctx);
// The same into `plan` (its vectors' capacity kept: a layer plans every micro-batch into one, no allocation of its
// own once warm).
void plan_dispatch_into(std::span<const std::int64_t> counts, Context& ctx, DispatchPlan& plan);

// The plan again from a stash (serialise / deserialise: the backward reuses the forward's without exchanging).
Tensor plan_to_tensor(const DispatchPlan& plan);
DispatchPlan plan_from_tensor(const Tensor& t);
// The same into `plan` (its vectors' capacity kept: a layer reads every micro-batch's plan back into one).
void plan_from_tensor_into(const Tensor& t, DispatchPlan& plan);

// rows [R, D] (routed rows, R = Σ send_rows) -> the rows of this rank's experts [received(), D]. Blocking.
// `capacity_rows` (0: none): the result is the first received() rows of a block of max(capacity_rows, received())
// rows, so a caller that passes one capacity every step asks the allocator for one size (the received rows follow
// the routing; a size the cache holds no block for would take a new one: moe_mlp.hpp, row_capacity_).
Tensor dispatch_rows(const Tensor& rows, const DispatchPlan& plan, Context& ctx, std::int64_t capacity_rows = 0);
// The inverse: rows [received(), D'] computed for the senders -> [R, D'] in this rank's routed-row layout (R is
// fixed by the micro-batch, so one size a step already).
Tensor combine_rows(const Tensor& rows, const DispatchPlan& plan, Context& ctx);

}  // namespace cleave::layers
