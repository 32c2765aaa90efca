// See hardware_profile.hpp.
#include "engine/planner/hardware_profile.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"
#include "layers/models/builder.hpp"
#include "engine/planner/profile_measure.hpp"
#include "partition/cost_model.hpp"

namespace cleave::planner {

HardwareProfile calibrate_this_machine(int ranks, std::int64_t m, std::int64_t n, std::int64_t k) {
  HardwareProfile p;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, cores / std::max(1, ranks));
  p.name = fmt::format("this machine (measured: {}, {} per rank)", count_of(cores, "core"),
                       count_of(threads, "thread"));
  p.device_type = DeviceType::kCpu;
  p.ranks_per_node = std::max(1, ranks);
  p.cores_per_node = cores;
  p.measured_cores = cores;
  p.measured_ranks_per_node = std::max(1, ranks);  // the share below prices `ranks` ranks on these cores
  ops::configure_cpu_threads(threads);
  m = std::clamp<std::int64_t>(m, 16, 2048);
  n = std::clamp<std::int64_t>(n, 16, 4096);
  k = std::clamp<std::int64_t>(k, 16, 4096);
  const auto resources = ops::make_device_resources(Device::cpu());  // a run's CPU state: GEMM primitives kept
  const ops::Context ctx{.resources = resources.get()};
  Tensor a = Tensor::empty({m, k}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  Tensor b = Tensor::empty({k, n}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  Tensor c = Tensor::empty({m, n}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  ops::fill(ctx, a, 0.5f);
  ops::fill(ctx, b, 0.25f);
  ops::gemm(ctx, a, b, c);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  int reps = 0;
  double elapsed = 0;
  while (elapsed < 0.2 || reps < 3) {
    ops::gemm(ctx, a, b, c);
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // More ranks than cores: each rank gets cores / ranks of a core on average.
  const double share = std::min(1.0, static_cast<double>(cores) / std::max(1, ranks));
  p.flops_f32 = share * 2.0 * static_cast<double>(m * n * k) * reps / elapsed;
  p.flops_bf16 = p.flops_f32 * 0.8;  // the CPU bf16 path widens to f32 GEMMs and narrows back
  // Memory bandwidth: y += x over 8 MiB vectors.
  Tensor x = Tensor::empty({1 << 21}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  Tensor y = Tensor::empty({1 << 21}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  ops::fill(ctx, x, 1.0f);
  ops::fill(ctx, y, 0.0f);
  const auto s2 = std::chrono::steady_clock::now();
  int passes = 0;
  double t2 = 0;
  while (t2 < 0.05 || passes < 3) {
    ops::axpy(ctx, 0.5f, x, y);
    ++passes;
    t2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - s2).count();
  }
  p.memory_bandwidth_Bps = share * 3.0 * 4.0 * static_cast<double>(1 << 21) * passes / t2;
  p.intra_node = Link{20e-6, 2e9};
  p.inter_node = Link{50e-6, 1e9};
  p.source = fmt::format("measured now: a {}x{}x{} f32 GEMM ran at {:.1f} GFLOP/s per rank; a streamed axpy at "
                         "{:.1f} GB/s{}; links are defaults for MPI over shared memory (20 us, 2 GB/s)",
                         m, k, n, p.flops_f32 / 1e9, p.memory_bandwidth_Bps / 1e9,
                         share < 1 ? fmt::format(" (x{:.2f}: {} ranks share {} cores)", share, ranks, cores) : "");
  return p;
}

HardwareProfile measure_this_machine(const partition::ModelSpec& spec, int ranks) {
  if (!partition::is_language_model(spec.type)) return calibrate_this_machine(ranks, 256, 256, 256);
  const auto g = spec.token_sizes();
  HardwareProfile p = calibrate_this_machine(ranks, 4 * g.seq_len, g.d_ff > 0 ? g.d_ff : 4 * g.d_model, g.d_model);
  measure_block_rates(p, spec, ranks);
  return p;
}

void measure_block_rates(HardwareProfile& profile, const partition::ModelSpec& spec, int ranks) {
  std::size_t index = spec.blocks.size();
  for (std::size_t i = 0; i < spec.blocks.size(); ++i) {
    if (partition::is_repeated_layer(spec.blocks[i].kind)) {
      index = i;
      break;
    }
  }
  if (index == spec.blocks.size()) return;
  auto layers = layers::build_blocks(spec, index, index + 1, layers::BuildOptions{cpu_allocator()});  // CPU rates
  layers::Layer& block = *layers.front();
  const partition::BlockCost cost = partition::block_cost(spec.blocks[index]);
  const std::int64_t t = spec.token_sizes().seq_len, d = spec.token_sizes().d_model;
  Tensor x = random_input({1, t, d}, DType::kF32);  // distinct tokens: a moe block routes them over its experts
  Tensor dy = Tensor::empty({1, t, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  const auto resources = ops::make_device_resources(Device::cpu());  // a run's CPU state: GEMM primitives kept
  layers::Context ctx;
  ctx.resources = resources.get();
  ops::fill(ctx, dy, 0.01f);
  const partition::BlockTimes times = time_block(block, x, dy, ctx, 5);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const double share = std::min(1.0, static_cast<double>(cores) / std::max(1, ranks));
  profile.block_forward_flops = share * cost.forward_flops / times.forward_s;
  profile.block_input_grad_flops = share * cost.input_grad_flops / times.input_grad_s;
  profile.block_weight_grad_flops = share * cost.weight_grad_flops / times.weight_grad_s;
  profile.source += fmt::format("; a {} ran at {:.1f} / {:.1f} / {:.1f} GFLOP/s (forward / input grad / weight grad), "
                                "used for every block",
                                spec.blocks[index].name, profile.block_forward_flops / 1e9,
                                profile.block_input_grad_flops / 1e9, profile.block_weight_grad_flops / 1e9);
}

}  // namespace cleave::planner
