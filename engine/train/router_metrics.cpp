// The mixture-of-experts step metrics (see router_metrics.hpp).
#include "engine/train/router_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

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
void move_bias(layers::Param& bias, const std::vector<double>& counts, double rate, const ops::Context& ctx) {
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

}  // namespace

std::vector<std::pair<std::string, double>> RouterMetrics::finish(comm::Communicator& world, int tp_rank,
                                                                  const ops::Context& ctx, int ep_size,
                                                                  int ep_rank) {
  if (!active()) return {};
  const std::size_t e = static_cast<std::size_t>(experts_), ep = static_cast<std::size_t>(ep_size);
  const std::size_t moved = ep > 1 ? 2 * ep * ep : 0;  // rows then bytes, [source][destination]
  const std::size_t per = e + 3 + moved;
  // Two slots after the blocks: the all-to-all seconds of this rank (all blocks) and 1 for a contributing rank.
  std::vector<double> v(blocks_.size() * per + 2, 0.0);
  if (tp_rank == 0) {
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const layers::BlockRouting* b = log_.find(blocks_[i]);
      if (b == nullptr) continue;
      for (std::size_t x = 0; x < b->counts.size() && x < e; ++x) v[i * per + x] = static_cast<double>(b->counts[x]);
      v[i * per + e] = b->aux_loss;
      v[i * per + e + 1] = b->z_loss;
      v[i * per + e + 2] = static_cast<double>(b->micro_batches);
      for (std::size_t d = 0; moved > 0 && d < b->sent_rows.size() && d < ep; ++d) {
        const std::size_t at = i * per + e + 3 + static_cast<std::size_t>(ep_rank) * ep + d;
        v[at] = static_cast<double>(b->sent_rows[d]);
        v[at + ep * ep] = static_cast<double>(b->sent_bytes[d]);
      }
      v[blocks_.size() * per] += b->all_to_all_s;
    }
    v[blocks_.size() * per + 1] = 1.0;
  }
  const std::vector<double> sum = reduce_doubles(world, v, comm::ReduceOp::kSum);
  double aux = 0, z = 0, imbalance = 0, micro = 0;
  std::vector<double> tokens(e, 0.0);
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    double total = 0, most = 0;
    for (std::size_t x = 0; x < e; ++x) {
      const double c = sum[i * per + x];
      tokens[x] += c;
      total += c;
      most = std::max(most, c);
    }
    if (total > 0) imbalance += most * static_cast<double>(e) / total;
    aux += sum[i * per + e];
    z += sum[i * per + e + 1];
    micro = std::max(micro, sum[i * per + e + 2]);
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const layers::BlockRouting* b = log_.find(blocks_[i]);
    if (b == nullptr || b->bias == nullptr || b->bias_update_rate <= 0) continue;
    move_bias(*b->bias, std::vector<double>(sum.begin() + static_cast<std::ptrdiff_t>(i * per),
                                            sum.begin() + static_cast<std::ptrdiff_t>(i * per + e)),
              b->bias_update_rate, ctx);
  }
  std::vector<std::pair<std::string, double>> out;
  if (micro == 0) return out;  // nothing routed (no training step ran a backward)
  out.emplace_back("moe_aux_loss", aux / micro);
  if (z != 0) out.emplace_back("moe_z_loss", z / micro);
  out.emplace_back("moe_load_imbalance", imbalance / static_cast<double>(blocks_.size()));
  for (std::size_t x = 0; x < e; ++x) out.emplace_back(fmt::format("moe_tokens_e{}", x), tokens[x]);
  for (std::size_t i = 0; moved > 0 && i < blocks_.size(); ++i) {
    for (std::size_t src = 0; src < ep; ++src) {
      for (std::size_t d = 0; d < ep; ++d) {
        const std::size_t at = i * per + e + 3 + src * ep + d;
        out.emplace_back(fmt::format("moe_ep_rows_b{}_s{}_d{}", i, src, d), sum[at]);
        out.emplace_back(fmt::format("moe_ep_bytes_b{}_s{}_d{}", i, src, d), sum[at + ep * ep]);
      }
    }
  }
  if (moved > 0 && sum[blocks_.size() * per + 1] > 0) {
    out.emplace_back("moe_ep_all_to_all_ms", 1e3 * sum[blocks_.size() * per] / sum[blocks_.size() * per + 1]);
  }
  return out;
}

std::string router_progress(const std::vector<std::pair<std::string, double>>& fields) {
  std::string out;
  for (const auto& [key, value] : fields) {
    if (key == "moe_aux_loss") out += fmt::format(" | aux {:.4f}", value);
    if (key == "moe_load_imbalance") out += fmt::format(" | imbalance {:.2f}", value);
  }
  return out;
}

}  // namespace cleave::train
