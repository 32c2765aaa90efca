// How many handoffs to a descheduled peer one collective of the engine waits when the ranks outnumber the cores
// (docs/planner.md, "More ranks than cores"), from the collective's algorithm: the exchange phases it runs one after
// another (engine/comm/mpi/mpi_collectives.cpp) and how many of each phase's peers are not running.
// Invariant: pure functions of their arguments; at least one handoff per phase of a meeting of 2 or more ranks,
// exactly one per phase for 2 ranks, none below 2 ranks.
#pragma once

namespace cleave::planner {

// The engine's exchanges on the CPU (MPI backend), for floating tensors: every one posts its point-to-point messages
// to all peers at once and waits for all of them (a direct exchange, not a ring).
enum class Exchange {
  kAllReduce,      // rank-ordered: a direct reduce-scatter, the local reduction, then a direct all-gather (2 phases)
  kReduceScatter,  // one direct phase
  kAllGather,      // one direct phase
  kAllToAll,       // all_to_all_v: one direct phase (ep dispatch and combine, the count exchange, cp's all-to-all)
  kPointToPoint,   // one message to one peer (a pipeline transfer, a cp ring hop)
};

// The phases a rank waits through one after another: 2 for the all-reduce (the second posts only once the first is
// complete), 1 for every other exchange.
int exchange_phases(Exchange e);

// Handoffs one phase over `ranks` ranks waits at `ranks_per_core` ranks per core (> 1): the first peer a rank waits
// for is behind a core's holder (one handoff); each of the other ranks - 2 peers is not running with probability
// 1 - 1 / ranks_per_core (one rank of a core runs at a time) and gets its core a time slice after the one before:
// 1 + (ranks - 2)(1 - 1 / ranks_per_core). 0 below 2 ranks or at no more than one rank per core.
double handoffs_per_phase(int ranks, double ranks_per_core);

// exchange_phases × handoffs_per_phase (a point-to-point transfer: one phase with one peer, whatever `ranks`).
double collective_handoffs(Exchange e, int ranks, double ranks_per_core);

}  // namespace cleave::planner
