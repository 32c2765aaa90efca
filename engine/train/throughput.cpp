// Model FLOPs, achieved FLOP/s and MFU (throughput.hpp).
#include "engine/train/throughput.hpp"

#include <limits>
#include <utility>
#include <vector>

#include "partition/cost_model.hpp"
#include "partition/cost_parts.hpp"

namespace cleave::train {

double model_flops_per_sample(const partition::ModelSpec& spec) {
  const std::vector<partition::BlockCost> costs = partition::model_costs(spec);
  double flops = 0;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    flops += costs[i].total_flops();
    const partition::BlockSpec& b = spec.blocks[i];
    if (b.n_heads <= 0 || b.seq_len <= 0) continue;  // no attention in this block
    // Attention's products as peers count them (every T² score) instead of the pairs the kernels compute.
    const int products = partition::cost_parts::kAttentionForwardProducts + partition::cost_parts::kAttentionBackwardProducts;
    flops += partition::cost_parts::attention_product_flops_as_peers_count(b.seq_len, b.in_features) -
             partition::cost_parts::attention_product_flops(b.seq_len, b.in_features, b.attention_window, products);
  }
  return flops;
}

double Throughput::flops_per_rank(double step_ms) const {
  if (!(step_ms > 0) || ranks < 1) return std::numeric_limits<double>::quiet_NaN();
  return model_flops_per_step / (step_ms * 1e-3) / static_cast<double>(ranks);
}

double Throughput::mfu(double step_ms) const {
  if (!(peak.per_rank > 0)) return std::numeric_limits<double>::quiet_NaN();
  return flops_per_rank(step_ms) / peak.per_rank;
}

Throughput make_throughput(const partition::ModelSpec& spec, std::int64_t global_batch_size, int world_size,
                           PeakFlops peak) {
  Throughput t;
  t.model_flops_per_step = model_flops_per_sample(spec) * static_cast<double>(global_batch_size);
  t.ranks = world_size;
  t.peak = std::move(peak);
  return t;
}

}  // namespace cleave::train
