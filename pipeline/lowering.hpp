// Lowering: turns a compute schedule (F / I / W / B) into the one the executor runs, adding
// SEND_F / RECV_F / SEND_B / RECV_B for every stage boundary that crosses ranks, one REDUCE_GRAD per
// stage and one OPTIMIZER_STEP per rank.
//
// Rule (why it cannot deadlock). Run the compute schedule's dry run: every compute action gets a step k.
// A transfer produced by a compute action at step k belongs to round k. On the producer's rank the SEND
// goes right after that compute; on the consumer's rank the RECV goes after the rank's last compute with
// step <= k, i.e. before its first compute with step > k — so receives are posted ahead, always before the
// compute that needs them (whose step is > k). Each rank's consecutive SEND/RECV form one batch (one NCCL
// group). Both ends of every transfer sit in the same round and rounds are visited in increasing order on
// every rank, so by induction over rounds every batch finds its partners posted: no deadlock under
// blocking, rendezvous sends (the validator's dry run confirms it for every generated schedule).
// Within a batch: sends first, then receives, each in (stage, micro-batch) order.
//
// Boundaries inside one rank (p = 1, ZB-V's turn at stage p−1 → p) get no SEND/RECV: the activation
// stays in the rank's memory. REDUCE_GRAD(s) goes after the stage's last W or B and after the batch that
// follows it, so the reduction never delays a neighbour's transfer; stages finishing at the same point
// reduce in the order their last backward ran. OPTIMIZER_STEP closes every rank.
#pragma once

#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

// Lowers a valid compute schedule. Throws Error (with the validator's grid) when the input is invalid or
// already lowered.
Schedule lower_schedule(const Schedule& compute_schedule);

// lower_schedule() for compute schedules; a lowered schedule is validated and returned unchanged.
Schedule ensure_lowered(const Schedule& schedule);

}  // namespace cleave::pipeline
