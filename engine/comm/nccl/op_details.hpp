// NcclOpDetails: what an NCCL op is ("4096 f32, sum"; a batch's peers), held as plain values in its Work and in the
// watchdog's record of it, and formatted into text only for an error or a timeout report (format_details), so an
// op formats and allocates nothing. The text is the one the backend always reported.
//
// Invariant: a batch's labels live in a vector whose capacity is kept by whoever holds the details (a pooled Work,
// a watchdog slot), reserved for kReservedPeers at creation: a batch of that many ops or fewer never grows it.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::comm::detail {

// One send or receive of a batch: "send to rank 1 (world 3) (4096 f32)".
struct P2PLabel {
  bool send = false;
  int peer = 0;
  int world = 0;  // the peer's world rank
  std::int64_t numel = 0;
  DType dtype = DType::kF32;
};

struct NcclOpDetails {
  enum class Form : std::uint8_t {
    kNone,           // barrier: ""
    kReduce,         // all_reduce: "N dtype, op"
    kReducePerRank,  // reduce_scatter: "N dtype per rank, op"
    kPerRank,        // all_gather: "N dtype per rank"
    kRoot,           // broadcast: "N dtype, root rank R"
    kBatch,          // batch_p2p: "K ops: send to rank P (world W) (N dtype), recv from ..."
  };
  static constexpr std::size_t kReservedPeers = 16;

  Form form = Form::kNone;
  std::int64_t numel = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::vector<P2PLabel> peers;  // kBatch

  NcclOpDetails() { peers.reserve(kReservedPeers); }

  void clear() {
    form = Form::kNone;
    peers.clear();
  }
  void set(Form f, const Tensor& t, ReduceOp reduce = ReduceOp::kSum, int root_rank = 0) {
    form = f;
    numel = t.numel();
    dtype = t.dtype();
    op = reduce;
    root = root_rank;
  }
  void add_peer(bool send, int peer, int world, const Tensor& t) {
    form = Form::kBatch;
    peers.push_back({send, peer, world, t.numel(), t.dtype()});
  }
};

// The details' text, as the reports show it (allocates: for errors and reports only).
inline std::string format_details(const NcclOpDetails& d) {
  using Form = NcclOpDetails::Form;
  switch (d.form) {
    case Form::kNone: return {};
    case Form::kReduce: return fmt::format("{} {}, {}", d.numel, dtype_name(d.dtype), reduce_op_name(d.op));
    case Form::kReducePerRank:
      return fmt::format("{} {} per rank, {}", d.numel, dtype_name(d.dtype), reduce_op_name(d.op));
    case Form::kPerRank: return fmt::format("{} {} per rank", d.numel, dtype_name(d.dtype));
    case Form::kRoot: return fmt::format("{} {}, root rank {}", d.numel, dtype_name(d.dtype), d.root);
    case Form::kBatch: break;
  }
  std::string text = fmt::format("{} ops:", d.peers.size());
  for (const P2PLabel& p : d.peers) {
    text += fmt::format(" {} rank {} (world {}) ({} {}),", p.send ? "send to" : "recv from", p.peer, p.world, p.numel,
                        dtype_name(p.dtype));
  }
  text.pop_back();
  return text;
}

}  // namespace cleave::comm::detail
