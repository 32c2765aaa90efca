// Point-to-point posting order and the pairing check (see p2p_posting.hpp).
#include "pipeline/p2p_posting.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "pipeline/dependencies.hpp"

namespace cleave::pipeline {

std::vector<P2PBlock> p2p_blocks(const std::vector<Action>& actions) {
  std::vector<P2PBlock> blocks;
  for (std::size_t i = 0; i < actions.size();) {
    if (!is_communication(actions[i].kind)) {
      ++i;
      continue;
    }
    P2PBlock block;
    block.first = i;
    while (i < actions.size() && is_communication(actions[i].kind)) ++i;
    block.end = i;
    blocks.push_back(block);
  }
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    P2PBlock& block = blocks[b];
    for (std::size_t i = block.first; i < block.end; ++i) {
      const bool early = b > 0 && is_recv(actions[i].kind);
      (early ? block.posted_early : block.posted).push_back(i);
    }
    if (b + 1 < blocks.size()) {
      for (std::size_t i = blocks[b + 1].first; i < blocks[b + 1].end; ++i) {
        if (is_recv(actions[i].kind)) block.next_receives.push_back(i);
      }
    }
  }
  return blocks;
}

std::vector<std::size_t> p2p_posting_order(const std::vector<Action>& actions) {
  std::vector<std::size_t> order;
  for (const P2PBlock& block : p2p_blocks(actions)) {
    order.insert(order.end(), block.posted.begin(), block.posted.end());
    order.insert(order.end(), block.next_receives.begin(), block.next_receives.end());
  }
  return order;
}

std::string P2POrderViolation::describe(const Schedule& schedule) const {
  auto token = [&](int rank, int position) {
    return position < 0 ? std::string("nothing") : format_action(schedule.ranks[rank][position]);
  };
  const std::string sent = token(sender, send_position);
  const std::string received = token(receiver, recv_position);
  return fmt::format(
      "point-to-point order between rank {} and rank {}: the {} message rank {} posts to rank {} is {}, but the "
      "{} receive rank {} posts from rank {} is {} (NCCL pairs sends and receives by posting order, not by tag: "
      "both ends must post a pair's messages in the same order)",
      sender, receiver, fmt::format("#{}", index + 1), sender, receiver, sent, fmt::format("#{}", index + 1), receiver,
      sender, received);
}

std::vector<P2POrderViolation> p2p_order_violations(const Schedule& schedule) {
  const int p = static_cast<int>(schedule.ranks.size());
  // Per (sender, receiver): the messages in the sender's posting order and the receiver's, each as the
  // position of its action and the message's identity (the RECV it lands in).
  struct Posted {
    int position;
    Action message;
  };
  std::vector<std::vector<Posted>> sends(static_cast<std::size_t>(p * p)), recvs(static_cast<std::size_t>(p * p));
  for (int r = 0; r < p; ++r) {
    const auto& actions = schedule.ranks[r];
    for (std::size_t i : p2p_posting_order(actions)) {
      const Action& a = actions[i];
      const int peer = schedule.rank_of(comm_partner(a).stage);
      if (is_send(a.kind)) {
        sends[static_cast<std::size_t>(r * p + peer)].push_back({static_cast<int>(i), comm_partner(a)});
      } else {
        recvs[static_cast<std::size_t>(peer * p + r)].push_back({static_cast<int>(i), a});
      }
    }
  }
  std::vector<P2POrderViolation> violations;
  for (int s = 0; s < p; ++s) {
    for (int t = 0; t < p; ++t) {
      const auto& out = sends[static_cast<std::size_t>(s * p + t)];
      const auto& in = recvs[static_cast<std::size_t>(s * p + t)];
      const std::size_t n = std::max(out.size(), in.size());
      for (std::size_t k = 0; k < n; ++k) {
        const bool has_send = k < out.size(), has_recv = k < in.size();
        if (has_send && has_recv && out[k].message == in[k].message) continue;
        violations.push_back(P2POrderViolation{s, t, static_cast<int>(k), has_send ? out[k].position : -1,
                                               has_recv ? in[k].position : -1});
        break;  // one per pair: later messages are shifted by the first mismatch
      }
    }
  }
  return violations;
}

}  // namespace cleave::pipeline
