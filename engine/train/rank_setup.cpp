// RankSetup: the grid, memory, op context and plan of one rank (see rank_setup.hpp).
#include "engine/train/rank_setup.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {
namespace {

comm::ProcessGrid make_grid(config::RunConfig& config, int world_size) {
  config.resolve(world_size);
  return comm::ProcessGrid::create(world_size, config.parallel.tensor_model_parallel_size,
                                   config.parallel.pipeline_model_parallel_size, config.parallel.data_parallel_size);
}

}  // namespace

RankSetup::RankSetup(config::RunConfig c, comm::Communicator& w, const ops::Backend* backend)
    : config(std::move(c)), world(w), grid(make_grid(config, w.size())), coords(grid.coords_of(w.rank())) {
  CLEAVE_CHECK(config.device.type == DeviceType::kCpu,
               "device.type '{}' is not available yet: the trainer runs on the CPU backend (device.type \"cpu\"); "
               "the CUDA backend is reachable through the op seam but not yet brought up for training",
               config.device.type);
  // The run's own memory and op context: nothing is shared with another run in this process.
  allocator = make_cpu_allocator();
  if (config.device.memory_limit > 0) allocator->set_limit(config.device.memory_limit);
  resources = ops::make_device_resources(Device::cpu());
  context.device = Device::cpu();
  context.allocator = allocator.get();
  context.resources = resources.get();
  context.backend = backend;
  context.precision = config.device.precision;  // bf16: mixed precision (ops/context.hpp)
  // Deterministic mode: GEMM bits independent of the thread count (shape-fixed slices, OpenBLAS at one
  // thread), so one rank with N threads and N ranks of one thread compute the same bits.
  context.gemm_mode = config.train.deterministic ? ops::GemmMode::kDeterministic : ops::GemmMode::kFast;
  if (config.train.deterministic) ops::configure_cpu_threads(ops::cpu_threads());

  batch = config.resolved_batch();
  groups = comm::build_grid_communicators(world, grid);
  model_parallel = world.split(coords.dp_rank, world.rank(), "model_parallel");
  if (grid.tp_size() > 1) context.tp_comm = groups.tp.get();
  plan = planning::make_plan(config, static_cast<int>(batch.gradient_accumulation_steps), coords.pp_rank);
}

bool RankSetup::counts_loss() const {
  const int last = plan.num_stages() - 1;
  for (int stage : plan.local_stages) {
    if (stage == last) return coords.tp_rank == 0;
  }
  return false;
}

}  // namespace cleave::train
