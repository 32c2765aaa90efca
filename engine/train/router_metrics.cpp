// The mixture-of-experts step metrics (see router_metrics.hpp).
#include "engine/train/router_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/train/collectives.hpp"

namespace cleave::train {

RouterMetrics::RouterMetrics(const partition::ModelSpec& spec) {
  for (const partition::BlockSpec& b : spec.blocks) {
    if (b.n_experts <= 0) continue;
    blocks_.push_back(b.name);
    experts_ = std::max(experts_, b.n_experts);
  }
}

std::vector<std::pair<std::string, double>> RouterMetrics::finish(comm::Communicator& world, int tp_rank) {
  if (!active()) return {};
  const std::size_t e = static_cast<std::size_t>(experts_), per = e + 3;
  std::vector<double> v(blocks_.size() * per, 0.0);
  if (tp_rank == 0) {
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const layers::BlockRouting* b = log_.find(blocks_[i]);
      if (b == nullptr) continue;
      for (std::size_t x = 0; x < b->counts.size() && x < e; ++x) v[i * per + x] = static_cast<double>(b->counts[x]);
      v[i * per + e] = b->aux_loss;
      v[i * per + e + 1] = b->z_loss;
      v[i * per + e + 2] = static_cast<double>(b->micro_batches);
    }
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
  std::vector<std::pair<std::string, double>> out;
  if (micro == 0) return out;  // nothing routed (no training step ran a backward)
  out.emplace_back("moe_aux_loss", aux / micro);
  if (z != 0) out.emplace_back("moe_z_loss", z / micro);
  out.emplace_back("moe_load_imbalance", imbalance / static_cast<double>(blocks_.size()));
  for (std::size_t x = 0; x < e; ++x) out.emplace_back(fmt::format("moe_tokens_e{}", x), tokens[x]);
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
