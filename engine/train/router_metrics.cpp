// The mixture-of-experts step metrics (see router_metrics.hpp).
#include "engine/train/router_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <span>
#include <string_view>

#include "engine/core/error.hpp"
#include "engine/train/collectives.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

RouterMetrics::RouterMetrics(const partition::ModelSpec& spec) {
  for (const partition::BlockSpec& b : spec.blocks) {
    if (b.n_experts <= 0) continue;
    blocks_.push_back(b.name);
    experts_ = std::max(experts_, b.n_experts);
  }
}

namespace {

// b_e += rate · sign(mean - count_e) on the bias's device; its bf16 working copy refreshed.
void move_bias(layers::Param& bias, std::span<const double> counts, double rate, const ops::Context& ctx) {
  CLEAVE_CHECK(bias.value.defined(),
               "model.bias_update_rate: the sigmoid router's bias {} is not held whole between steps (optimizer."
               "zero_stage 3 keeps only shards); set model.bias_update_rate=0 or optimizer.zero_stage to 2 or less",
               bias.name);
  Tensor host = ops::to_host(ctx, bias.value);
  double total = 0;
  for (double c : counts) total += c;
  const double mean = total / static_cast<double>(counts.size());
  float* b = host.data<float>();
  for (std::size_t e = 0; e < counts.size() && static_cast<std::int64_t>(e) < host.numel(); ++e) {
    const double sign = counts[e] < mean ? 1.0 : (counts[e] > mean ? -1.0 : 0.0);
    b[e] = static_cast<float>(static_cast<double>(b[e]) + rate * sign);
  }
  ops::transfer(ctx, host, bias.value);
  if (bias.working.defined()) ops::copy(ctx, bias.value, bias.working);
  ops::synchronize(ctx);  // `host` goes when this returns
}

// The vector every rank contributes to the step's one sum: per routed block `per` doubles (the expert counts [E],
// aux loss, z loss, micro-batches, then under ep the rows and the bytes sent [source][destination], ep² each), then
// two slots: this rank's all-to-all seconds (all blocks) and 1 for a contributing rank; then per all-to-all kind its
// seconds and, of them, the wait for the last peer (AllToAllSplit).
struct PackedLayout {
  std::size_t blocks, e, ep;
  std::size_t moved() const { return ep > 1 ? 2 * ep * ep : 0; }
  std::size_t per() const { return e + 3 + moved(); }
  std::size_t size() const { return blocks * per() + 2 + 2 * layers::kNumAllToAllKinds; }
  std::size_t count(std::size_t i, std::size_t x) const { return i * per() + x; }
  std::size_t aux(std::size_t i) const { return i * per() + e; }
  std::size_t z(std::size_t i) const { return i * per() + e + 1; }
  std::size_t micro_batches(std::size_t i) const { return i * per() + e + 2; }
  std::size_t rows(std::size_t i, std::size_t src, std::size_t d) const { return i * per() + e + 3 + src * ep + d; }
  std::size_t bytes(std::size_t i, std::size_t src, std::size_t d) const { return rows(i, src, d) + ep * ep; }
  std::size_t all_to_all_s() const { return blocks * per(); }
  std::size_t contributors() const { return blocks * per() + 1; }
  std::size_t kind_s(std::size_t k) const { return blocks * per() + 2 + k; }
  std::size_t kind_wait_s(std::size_t k) const { return kind_s(k) + layers::kNumAllToAllKinds; }
};

// The per-micro-batch maxima every rank contributes to the step's one max (ep > 1): per routed block, the most rows
// each ep rank received in one micro-batch [ep] (this rank's slot only), then the most rows a rank sent in one (its
// tokens × k, the mean rows per rank).
std::size_t peak_slot(std::size_t ep, std::size_t i, std::size_t d) { return i * (ep + 1) + d; }

void pack_peaks(const layers::RouterLog& log, const std::vector<std::string>& blocks, std::size_t ep,
                std::size_t ep_rank, std::vector<double>& v) {
  v.assign(blocks.size() * (ep + 1), 0.0);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const layers::BlockRouting* b = log.find(blocks[i]);
    if (b == nullptr) continue;
    v[peak_slot(ep, i, ep_rank)] = static_cast<double>(b->most_received);
    v[peak_slot(ep, i, ep)] = static_cast<double>(b->most_sent);
  }
}

// The ep group's shortest time in each of the step's calls (a max-reduce of the negated times over `ep`) into
// `shortest` (the caller's, kept from step to step: no allocation once it has held a step's calls); the rank's own
// times without a group. Collective over `ep` (every rank of a group runs the same calls).
void shortest_over_group(const std::vector<layers::AllToAllCall>& calls, comm::Communicator* ep,
                         std::vector<double>& shortest) {
  shortest.resize(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) shortest[i] = -calls[i].seconds;
  if (ep != nullptr && ep->size() > 1 && !shortest.empty()) {
    reduce_doubles_into(*ep, shortest, shortest, comm::ReduceOp::kMax);
  }
  for (double& x : shortest) x = -x;
}

// This rank's contribution into `v` (resized to at.size()): its log of each block in `blocks` (zeros for a block it
// did not route).
void pack_log(const layers::RouterLog& log, const std::vector<std::string>& blocks, const PackedLayout& at,
              std::size_t ep_rank, const AllToAllSplit& split, std::vector<double>& v) {
  v.assign(at.size(), 0.0);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const layers::BlockRouting* b = log.find(blocks[i]);
    if (b == nullptr) continue;
    for (std::size_t x = 0; x < b->counts.size() && x < at.e; ++x) {
      v[at.count(i, x)] = static_cast<double>(b->counts[x]);
    }
    v[at.aux(i)] = b->aux_loss;
    v[at.z(i)] = b->z_loss;
    v[at.micro_batches(i)] = static_cast<double>(b->micro_batches);
    for (std::size_t d = 0; at.moved() > 0 && d < b->sent_rows.size() && d < at.ep; ++d) {
      v[at.rows(i, ep_rank, d)] = static_cast<double>(b->sent_rows[d]);
      v[at.bytes(i, ep_rank, d)] = static_cast<double>(b->sent_bytes[d]);
    }
    v[at.all_to_all_s()] += b->all_to_all_s;
  }
  v[at.contributors()] = 1.0;
  for (std::size_t k = 0; k < layers::kNumAllToAllKinds; ++k) {
    v[at.kind_s(k)] = split.seconds[k];
    v[at.kind_wait_s(k)] = split.wait[k];
  }
}

// Writes the fields list in place: entry `at` of `out` becomes (the formatted name, value), reusing the entry's
// string (no allocation once it has held a name this long) and growing the list only past its end.
class FieldWriter {
 public:
  explicit FieldWriter(std::vector<std::pair<std::string, double>>& out) : out_(out) {}
  template <typename... Args>
  void add(double value, fmt::format_string<Args...> format, Args&&... args) {
    std::array<char, 96> name{};
    const auto written = fmt::format_to_n(name.data(), name.size(), format, std::forward<Args>(args)...);
    const std::string_view view(name.data(), std::min(written.size, name.size()));
    if (count_ == out_.size()) {
      out_.emplace_back(std::string(view), value);
    } else {
      out_[count_].first.assign(view);
      out_[count_].second = value;
    }
    ++count_;
  }
  // Drops the entries past the last one written.
  void end() { out_.resize(count_); }

 private:
  std::vector<std::pair<std::string, double>>& out_;
  std::size_t count_ = 0;
};

// The fields from the world's sum into `out` (metric names and meanings: router_metrics.hpp); none when nothing was
// routed. `tokens` is scratch; both kept by the caller from step to step, so a warm step allocates nothing here.
void metric_fields(const std::vector<double>& sum, const std::vector<double>& peaks, const PackedLayout& at,
                   std::vector<double>& tokens, std::vector<std::pair<std::string, double>>& out) {
  double aux = 0, z = 0, imbalance = 0, micro = 0;
  tokens.assign(at.e, 0.0);
  for (std::size_t i = 0; i < at.blocks; ++i) {
    double total = 0, most = 0;
    for (std::size_t x = 0; x < at.e; ++x) {
      const double c = sum[at.count(i, x)];
      tokens[x] += c;
      total += c;
      most = std::max(most, c);
    }
    if (total > 0) imbalance += most * static_cast<double>(at.e) / total;
    aux += sum[at.aux(i)];
    z += sum[at.z(i)];
    micro = std::max(micro, sum[at.micro_batches(i)]);
  }
  FieldWriter w(out);
  if (micro == 0) {  // nothing routed (no training step ran a backward)
    w.end();
    return;
  }
  w.add(aux / micro, "moe_aux_loss");
  if (z != 0) w.add(z / micro, "moe_z_loss");
  w.add(imbalance / static_cast<double>(at.blocks), "moe_load_imbalance");
  for (std::size_t x = 0; x < at.e; ++x) w.add(tokens[x], "moe_tokens_e{}", x);
  for (std::size_t i = 0; at.moved() > 0 && i < at.blocks; ++i) {
    for (std::size_t src = 0; src < at.ep; ++src) {
      for (std::size_t d = 0; d < at.ep; ++d) {
        w.add(sum[at.rows(i, src, d)], "moe_ep_rows_b{}_s{}_d{}", i, src, d);
        w.add(sum[at.bytes(i, src, d)], "moe_ep_bytes_b{}_s{}_d{}", i, src, d);
      }
    }
  }
  for (std::size_t i = 0; at.moved() > 0 && i < at.blocks; ++i) {
    for (std::size_t d = 0; d < at.ep; ++d) w.add(peaks[peak_slot(at.ep, i, d)], "moe_ep_mb_rows_b{}_d{}", i, d);
    w.add(peaks[peak_slot(at.ep, i, at.ep)], "moe_ep_mb_mean_rows_b{}", i);
  }
  if (at.moved() > 0 && sum[at.contributors()] > 0) {
    const double per_rank = 1e3 / sum[at.contributors()];
    w.add(per_rank * sum[at.all_to_all_s()], "moe_ep_all_to_all_ms");
    double wait = 0;
    for (std::size_t k = 0; k < layers::kNumAllToAllKinds; ++k) {
      const std::string_view name = layers::all_to_all_kind_name(static_cast<layers::AllToAllKind>(k));
      w.add(per_rank * sum[at.kind_s(k)], "moe_ep_{}_ms", name);
      w.add(per_rank * sum[at.kind_wait_s(k)], "moe_ep_{}_wait_ms", name);
      wait += sum[at.kind_wait_s(k)];
    }
    w.add(per_rank * wait, "moe_ep_all_to_all_wait_ms");
  }
  w.end();
}

}  // namespace

AllToAllSplit split_all_to_alls(const std::vector<layers::AllToAllCall>& calls, const std::vector<double>& shortest) {
  CLEAVE_CHECK(shortest.size() == calls.size(), "split_all_to_alls: {} calls but {} shortest times", calls.size(),
               shortest.size());
  AllToAllSplit split;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto k = static_cast<std::size_t>(calls[i].kind);
    split.seconds[k] += calls[i].seconds;
    split.wait[k] += std::max(0.0, calls[i].seconds - shortest[i]);
  }
  return split;
}

std::span<const std::pair<std::string, double>> RouterMetrics::finish(comm::Communicator& world, int tp_rank,
                                                                      const ops::Context& ctx, int ep_size,
                                                                      int ep_rank, comm::Communicator* ep) {
  if (!active()) return {};
  const PackedLayout at{blocks_.size(), static_cast<std::size_t>(experts_), static_cast<std::size_t>(ep_size)};
  shortest_over_group(log_.calls(), ep, shortest_);
  const AllToAllSplit split = split_all_to_alls(log_.calls(), shortest_);
  if (tp_rank == 0) {
    pack_log(log_, blocks_, at, static_cast<std::size_t>(ep_rank), split, mine_);
  } else {
    mine_.assign(at.size(), 0.0);
  }
  sum_.resize(at.size());
  reduce_doubles_into(world, mine_, sum_, comm::ReduceOp::kSum);
  if (at.moved() > 0) {  // every rank alike: ep_size is the run's
    if (tp_rank == 0) {
      pack_peaks(log_, blocks_, at.ep, static_cast<std::size_t>(ep_rank), peak_mine_);
    } else {
      peak_mine_.assign(blocks_.size() * (at.ep + 1), 0.0);
    }
    peaks_.resize(peak_mine_.size());
    reduce_doubles_into(world, peak_mine_, peaks_, comm::ReduceOp::kMax);
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const layers::BlockRouting* b = log_.find(blocks_[i]);
    if (b == nullptr || b->bias == nullptr || b->bias_update_rate <= 0) continue;
    move_bias(*b->bias, std::span<const double>(sum_).subspan(at.count(i, 0), at.e), b->bias_update_rate, ctx);
  }
  metric_fields(sum_, peaks_, at, tokens_, fields_);
  return fields_;
}

void append_router_progress(fmt::memory_buffer& out, const std::vector<std::pair<std::string, double>>& fields) {
  for (const auto& [key, value] : fields) {
    if (key == "moe_aux_loss") fmt::format_to(fmt::appender(out), " | aux {:.4f}", value);
    if (key == "moe_load_imbalance") fmt::format_to(fmt::appender(out), " | imbalance {:.2f}", value);
  }
}

}  // namespace cleave::train
