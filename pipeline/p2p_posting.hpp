// The order in which one pp rank posts its point-to-point operations: shared by the executor, which posts
// them, and the validator, which proves that both ends of every rank pair post them in the same order.
//
// Why the order matters: NCCL matches a send to a receive by posting order per (sender, receiver) pair, not
// by tag (MPI matches by tag, so a CPU run would not notice). If rank a posts its sends to rank b as
// [0SEND_F3, 0SEND_F4] and rank b posts its receives from a as [1RECV_F4, 1RECV_F3], micro-batch 3's
// activation lands in micro-batch 4's buffer: no error, wrong numbers (or a hang when the shapes differ).
//
// The rule (what the executor does): a rank's actions are cut into communication blocks (maximal runs of
// consecutive SEND/RECV). Posting block b issues, in order, (1) its actions that were not posted earlier,
// in list order, as one batch, then (2) the receives of block b + 1, in list order, as a batch of their own
// ("posted early", see executor.hpp). So every receive but those of the first block is posted one block
// early; sends are posted in list order, and so are receives.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

// One communication block of a rank's action list and what its posting issues.
struct P2PBlock {
  std::size_t first = 0;                    // the block is actions [first, end)
  std::size_t end = 0;
  std::vector<std::size_t> posted;          // its actions posted with it, in list order (not posted early)
  std::vector<std::size_t> posted_early;    // its receives, already posted with the previous block
  std::vector<std::size_t> next_receives;   // the next block's receives, posted right after `posted`
};

// The blocks of one rank's (lowered) action list, in order.
std::vector<P2PBlock> p2p_blocks(const std::vector<Action>& actions);

// Every SEND/RECV of the list as the rank posts it: indices into `actions`, in posting order.
std::vector<std::size_t> p2p_posting_order(const std::vector<Action>& actions);

// A violation of the pairing rule: the k-th message rank `sender` posts to `receiver` is not the k-th one
// `receiver` posts a receive for from `sender`. Positions index the ranks' action lists; -1 when that side
// has no k-th operation.
struct P2POrderViolation {
  int sender = -1;
  int receiver = -1;
  int index = 0;            // k, 0-based
  int send_position = -1;   // on the sender
  int recv_position = -1;   // on the receiver
  std::string describe(const Schedule& schedule) const;
};

// Checks every (sender, receiver) pair of a lowered schedule: one violation per offending pair (its first
// mismatch; later messages are shifted by it), pairs in (sender, receiver) order; empty when every pair
// matches. Assumes every SEND/RECV names a neighbour stage on another rank (the
// validator checks that first).
std::vector<P2POrderViolation> p2p_order_violations(const Schedule& schedule);

}  // namespace cleave::pipeline
