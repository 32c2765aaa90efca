// Model FLOPs, achieved FLOP/s and MFU (throughput.hpp).
#include "engine/train/throughput.hpp"

#include <limits>
#include <utility>

#include "partition/cost_model.hpp"

namespace cleave::train {

double model_flops_per_sample(const partition::ModelSpec& spec) {
  double flops = 0;
  for (const partition::BlockCost& c : partition::model_costs(spec)) flops += c.total_flops();
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
