// The prices a HardwareProfile puts on work (hardware_profile.hpp): a GEMM's efficiency and seconds (the roofline's
// curve, the tile waves, the per-shape table, published attention rates), a pass's roofline seconds, the cores a rank
// gets when ranks share a node, and the alpha-beta collectives over the profile's links. Pure functions of the
// profile: reading and writing the file is hardware_profile.cpp's. Each price is finite and >= 0 for a profile
// load_profile returned.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "engine/core/error.hpp"
#include "partition/hardware_profile.hpp"

namespace cleave::partition {

double HardwareProfile::gemm_efficiency_at(double flops, bool bf16) const {
  CLEAVE_ASSERT(has_roofline(), "profile '{}' has no gemm_efficiency curve", name);
  const auto& c = !bf16 && !gemm_efficiency_f32.empty() ? gemm_efficiency_f32 : gemm_efficiency;
  if (flops <= c.front().first) return c.front().second;
  if (flops >= c.back().first) return c.back().second;
  std::size_t i = 1;
  while (c[i].first < flops) ++i;
  const double x = (std::log(flops) - std::log(c[i - 1].first)) / (std::log(c[i].first) - std::log(c[i - 1].first));
  return c[i - 1].second + x * (c[i].second - c[i - 1].second);
}

double HardwareProfile::gemm_wave_seconds(const Gemm& g, bool bf16) const {
  if (sm_count <= 0 || gemm_tiles.empty() || g.fused_attention || g.launch_flops() <= 0) return 0.0;
  const auto& curve = !bf16 && !gemm_efficiency_f32.empty() ? gemm_efficiency_f32 : gemm_efficiency;
  double top = 0;
  for (const auto& point : curve) top = std::max(top, point.second);
  const double peak = bf16 ? peak_flops_bf16 : peak_flops_f32;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [tm, tn] : gemm_tiles) {
    const double tiles = std::ceil(g.batch) * std::ceil(g.m / tm) * std::ceil(g.n / tn);
    const double waves = std::ceil(tiles / sm_count);
    best = std::min(best, waves * 2.0 * tm * tn * g.k * sm_count / (peak * top));
  }
  return best;
}

bool HardwareProfile::uses_shape_table(const Gemm& g, bool bf16) const {
  return bf16 && !g.fused_attention && !gemm_shape_efficiency.empty();
}

double HardwareProfile::gemm_efficiency_of(const Gemm& g, bool bf16) const {
  if (uses_shape_table(g, bf16)) return gemm_shape_efficiency.at(g.m, g.n, g.k, g.batch);
  if (g.fused_attention && !attention_kernel.empty() && g.attention_pass != AttentionPass::kNone) {
    CLEAVE_CHECK(bf16, "profile '{}': attention kernel '{}' is priced from bf16 benchmarks (attention_rates); an f32 run "
                 "has no published rate for it: leave --attention-kernel out", name, attention_kernel);
    const double rate = attention_rates.flops_per_s_between_head_dims(attention_kernel, g.attention_pass,
                                                                      g.attention_causal, g.attention_head_dim,
                                                                      g.attention_seq);
    return std::min(1.0, rate / peak_flops_bf16);
  }
  // A batched GEMM is one launch: its efficiency is that of its whole work; a grouped one's that of one group.
  double efficiency = gemm_efficiency_at(g.launch_flops(), bf16);
  if (g.fused_attention && attention_efficiency > 0) efficiency = std::min(efficiency, attention_efficiency);
  return efficiency;
}

double HardwareProfile::gemm_seconds(const Gemm& g, bool bf16) const {
  const double flops = g.launch_flops();  // one launch; a grouped GEMM's groups each take as long
  if (flops <= 0) return 0.0;
  const double peak = bf16 ? peak_flops_bf16 : peak_flops_f32;
  const double element = bf16 ? 2.0 : 4.0;
  const double waves = uses_shape_table(g, bf16) ? 0.0 : gemm_wave_seconds(g, bf16);
  return g.groups *
         std::max({flops / (peak * gemm_efficiency_of(g, bf16)), waves, g.traffic_bytes(element) / memory_bandwidth_Bps});
}

std::pair<double, double> HardwareProfile::unfused_attention_seconds(const ProbabilitiesWork& work, bool bf16) const {
  CLEAVE_CHECK(!attention_kernel.empty() && !work.stored_forward.gemms.empty(),
               "profile '{}': the unfused attention core needs a named kernel and a probabilities run", name);
  CLEAVE_CHECK(bf16, "profile '{}': attention kernel '{}' is priced from 16-bit benchmarks (attention_rates); an f32 "
               "run has no published rate for it: leave --attention-kernel out", name, attention_kernel);
  const Gemm& scores = work.stored_forward.gemms.front();  // S = Q·Kᵀ: [T, T] over d, one per head
  const double forward_flops = 4.0 * scores.m * scores.n * scores.k * scores.batch;
  const auto rate = [&](AttentionPass pass) {
    return attention_rates.flops_per_s_between_head_dims(attention_kernel, pass, /*causal=*/false, scores.k, scores.m);
  };
  // The rate was measured at the benchmark's occupancy (16k tokens x 2048 width); a smaller problem is never priced
  // below what the roofline charges for the same products, softmax and launches.
  const auto roofline = [&](const PassWork& stored, double bytes, const PassWork& dropout) {
    return gemm_pass_seconds(stored, bf16) + (bytes - dropout.stream_bytes) / memory_bandwidth_Bps +
           (stored.kernels - dropout.kernels) * kernel_launch_s;
  };
  return {std::max(forward_flops / rate(AttentionPass::kForward),
                   roofline(work.stored_forward, work.forward_bytes, work.dropout_forward)),
          std::max(2.5 * forward_flops / rate(AttentionPass::kBackward),
                   roofline(work.stored_backward, work.backward_bytes, work.dropout_backward))};
}

double HardwareProfile::gemm_pass_seconds(const PassWork& work, bool bf16) const {
  double seconds = 0;
  for (const Gemm& g : work.gemms) seconds += gemm_seconds(g, bf16);
  return seconds;
}

double HardwareProfile::roofline_seconds(const PassWork& work, bool bf16) const {
  return gemm_pass_seconds(work, bf16) + elementwise_seconds(work) + launch_seconds(work);
}

double HardwareProfile::cores_per_rank(int cores, int ranks) {
  if (cores <= 0) return 0.0;
  ranks = std::max(1, ranks);
  return ranks <= cores ? static_cast<double>(cores / ranks) : static_cast<double>(cores) / ranks;
}

double HardwareProfile::cores_per_rank(int ranks) const { return cores_per_rank(cores_per_node, ranks); }

double HardwareProfile::core_sharing(int ranks_on_node) const {
  if (cores_per_node <= 0) return 1.0;
  const int measured_on = measured_cores > 0 ? measured_cores : cores_per_node;
  return cores_per_rank(measured_on, measured_ranks_per_node) / cores_per_rank(ranks_on_node);
}

double HardwareProfile::spread_collective_s(double bytes, int ranks, int per_node, bool all_reduce) const {
  const double ring = ring_collective_s(bytes, ranks, per_node, all_reduce);
  const int g = std::clamp(per_node, 1, std::max(1, ranks));
  if (!all_reduce || (ranks + g - 1) / g <= 1) return ring;
  return std::min(ring, tree_all_reduce_s(bytes, ranks, per_node));
}

double HardwareProfile::ring_collective_s(double bytes, int ranks, int per_node, bool all_reduce) const {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double f = all_reduce ? 2.0 : 1.0;
  const int g = std::clamp(per_node, 1, ranks);
  const int k = (ranks + g - 1) / g;
  if (k <= 1) return f / 2.0 * intra_node.all_reduce_s(bytes, ranks);
  const double n = ranks;
  const double nic = f * (n - 1) / n * (bytes / g) / inter_node.bandwidth_Bps;
  const double nvlink = g > 1 ? f * (n - 1) / n * bytes / intra_node.bandwidth_Bps : 0.0;
  return std::max(nic, nvlink) + f * ((ranks - k) * intra_node.latency_s + (k - 1) * inter_node.latency_s);
}

double HardwareProfile::tree_all_reduce_s(double bytes, int ranks, int per_node) const {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const int g = std::clamp(per_node, 1, ranks);
  const int k = (ranks + g - 1) / g;
  CLEAVE_ASSERT(k >= 2, "tree_all_reduce_s: {} ranks at {} per node are one node; the tree spans nodes", ranks, g);
  const double network = (k == 2 ? 1.0 : 2.0) * (bytes / g) / inter_node.bandwidth_Bps;
  const double nvlink = g > 1 ? 2.0 * bytes / intra_node.bandwidth_Bps : 0.0;
  const int depth = static_cast<int>(std::floor(std::log2(static_cast<double>(k))));
  return std::max(network, nvlink) + 2.0 * ((g - 1) * intra_node.latency_s + depth * inter_node.latency_s);
}

double Link::all_reduce_s(double bytes, int ranks) const {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks;
  return 2.0 * (n - 1) / n * bytes / bandwidth_Bps + 2.0 * (n - 1) * latency_s;
}

}  // namespace cleave::partition
