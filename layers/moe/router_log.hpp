// RouterLog: what the mixture-of-experts layers routed during one optimizer step on this rank, per block (its
// name): tokens per expert summed over the step's micro-batches, the aux and z losses summed, and how many
// micro-batches added to it. Owned by the run (the trainer, engine/train/router_metrics.hpp), reached through
// layers::Context::router_log (null: nothing is recorded), cleared at the start of every step.
//
// Invariant: a block adds once per micro-batch, in backward_input (which runs exactly once per micro-batch in
// training, whatever the recomputation; evaluation runs no backward and records nothing).
// clear() empties the records but keeps them (and their vectors' capacity), so a step after the first allocates
// nothing here; a record no call touched since the last clear() reads as absent (find).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "layers/layer.hpp"

namespace cleave::layers {

// The expert-parallel all-to-alls of a moe block, in the order a micro-batch runs them: the count exchange and the
// dispatch before the experts, the combine after them (forward); the output gradients' dispatch and the input
// gradients' combine (backward).
enum class AllToAllKind : int { kCountExchange, kDispatch, kCombine, kDispatchGrad, kCombineGrad };
inline constexpr std::size_t kNumAllToAllKinds = 5;
// "count_exchange", "dispatch", "combine", "dispatch_grad", "combine_grad": the metrics' names (moe_ep_<name>_ms).
constexpr std::string_view all_to_all_kind_name(AllToAllKind kind) {
  constexpr std::array<std::string_view, kNumAllToAllKinds> kNames = {"count_exchange", "dispatch", "combine",
                                                                      "dispatch_grad", "combine_grad"};
  return kNames[static_cast<std::size_t>(kind)];
}

// One timed all-to-all of the step on this rank (AllToAllTimer): every rank of an ep group runs the same ones in
// the same order, so the i-th call of each is the same collective (RouterMetrics pairs them to tell the wait for
// the last peer from the exchange's own time).
struct AllToAllCall {
  AllToAllKind kind = AllToAllKind::kDispatch;
  double seconds = 0.0;
};

struct BlockRouting {
  std::vector<std::int64_t> counts;  // tokens per expert
  double aux_loss = 0.0;
  double z_loss = 0.0;
  std::int64_t micro_batches = 0;
  // The sigmoid router's selection bias and its step per optimizer step (DeepSeek-V3's auxiliary-loss-free
  // balancing): the run moves it by the step's global load (engine/train/router_metrics.hpp). Null: none.
  Param* bias = nullptr;
  double bias_update_rate = 0.0;
  // Expert parallelism (layers/moe/expert_dispatch.hpp), summed over the step's micro-batches: routed rows and
  // bytes this rank sent to each ep rank in the forward dispatch (the combine returns the same counts; the
  // backward moves the same again, gradients out and back), and rows received from each. Empty at ep 1.
  std::vector<std::int64_t> sent_rows;
  std::vector<std::int64_t> sent_bytes;
  std::vector<std::int64_t> received_rows;
  // The most rows this rank received in one dispatch (one micro-batch) of the step, and the most it sent (its
  // tokens × k: the same every micro-batch, and the mean rows per rank of the ep group). 0 at ep 1.
  std::int64_t most_received = 0;
  std::int64_t most_sent = 0;
  // Seconds this rank spent in the block's all-to-alls (count exchange, dispatch and combine, forward and
  // backward; each waits for its slowest peer), summed over the step's micro-batches. 0 at ep 1.
  double all_to_all_s = 0.0;
  // Touched since the log's last clear() (a kept record that was not reads as absent).
  bool in_step = false;

  // Back to a new record's values, keeping the vectors' capacity.
  void reset() {
    counts.clear();
    aux_loss = z_loss = 0.0;
    micro_batches = 0;
    bias = nullptr;
    bias_update_rate = 0.0;
    sent_rows.clear();
    sent_bytes.clear();
    received_rows.clear();
    most_received = most_sent = 0;
    all_to_all_s = 0.0;
    in_step = false;
  }
};

class RouterLog {
 public:
  void add(const std::string& block, std::span<const std::int64_t> counts, double aux_loss, double z_loss) {
    BlockRouting& b = record(block);
    if (b.counts.size() < counts.size()) b.counts.resize(counts.size(), 0);
    for (std::size_t i = 0; i < counts.size(); ++i) b.counts[i] += counts[i];
    b.aux_loss += aux_loss;
    b.z_loss += z_loss;
    ++b.micro_batches;
  }
  // row_bytes: one row's bytes on the wire (d_model × the activation dtype's size).
  void add_dispatch(const std::string& block, std::span<const std::int64_t> sent, std::span<const std::int64_t> received,
                    std::int64_t row_bytes) {
    BlockRouting& b = record(block);
    if (b.sent_rows.size() < sent.size()) {
      b.sent_rows.resize(sent.size(), 0);
      b.sent_bytes.resize(sent.size(), 0);
    }
    if (b.received_rows.size() < received.size()) b.received_rows.resize(received.size(), 0);
    for (std::size_t i = 0; i < sent.size(); ++i) {
      b.sent_rows[i] += sent[i];
      b.sent_bytes[i] += sent[i] * row_bytes;
    }
    std::int64_t sent_now = 0, received_now = 0;
    for (const std::int64_t r : sent) sent_now += r;
    for (std::size_t i = 0; i < received.size(); ++i) {
      b.received_rows[i] += received[i];
      received_now += received[i];
    }
    b.most_sent = std::max(b.most_sent, sent_now);
    b.most_received = std::max(b.most_received, received_now);
  }
  void add_all_to_all_time(const std::string& block, AllToAllKind kind, double seconds) {
    record(block).all_to_all_s += seconds;
    calls_.push_back({kind, seconds});
  }
  // The step's timed all-to-alls on this rank, in the order they ran (all blocks).
  const std::vector<AllToAllCall>& calls() const { return calls_; }
  void note_bias(const std::string& block, Param* bias, double rate) {
    BlockRouting& b = record(block);
    b.bias = bias;
    b.bias_update_rate = rate;
  }
  void clear() {
    for (auto& [block, b] : blocks_) b.reset();  // the map's nodes kept: no allocation after the first step
    calls_.clear();  // keeps its capacity
  }
  // Every block's record, by name (`cleave profile` reads what a timed block routed).
  const std::map<std::string, BlockRouting>& blocks() const { return blocks_; }
  // The block's record; null when it routed nothing on this rank this step.
  const BlockRouting* find(const std::string& block) const {
    const auto it = blocks_.find(block);
    return it == blocks_.end() || !it->second.in_step ? nullptr : &it->second;
  }

 private:
  BlockRouting& record(const std::string& block) {
    BlockRouting& b = blocks_[block];
    b.in_step = true;
    return b;
  }

  std::map<std::string, BlockRouting> blocks_;
  std::vector<AllToAllCall> calls_;
};

}  // namespace cleave::layers
