// RankSetup: the grid, memory, op context and plan of one rank (see rank_setup.hpp).
#include "engine/train/rank_setup.hpp"

#include "cleave/config.hpp"
#include "engine/comm/launch_env.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {
namespace {

comm::ProcessGrid make_grid(config::RunConfig& config, int world_size) {
  config.resolve(world_size);
  return comm::ProcessGrid::create(world_size, config.parallel.tensor_model_parallel_size,
                                   config.parallel.pipeline_model_parallel_size, config.parallel.data_parallel_size,
                                   config.parallel.context_parallel_size, config.parallel.expert_model_parallel_size);
}

// The device of this rank (see rank_setup.hpp, placement).
Device run_device(const config::RunConfig& config, const comm::Communicator& world) {
  if (config.device.type == DeviceType::kCpu) return Device::cpu();
  CLEAVE_CHECK(CLEAVE_WITH_CUDA != 0,
               "device.type \"cuda\": this cleave was built without CUDA (CMake found no CUDA toolkit, cuDNN or NCCL; "
               "`cleave version` says which), so it trains on the cpu only: set device.type \"cpu\" or rebuild");
  // The local rank make_world_communicator resolved once (the NCCL probe placed the rank by the same number); a
  // world made outside the factory (tests) has none and is one node.
  const int local_rank = world.options().local_rank >= 0 ? world.options().local_rank : world.rank();
  return Device::cuda(rank_gpu({world.rank(), local_rank, ops::visible_devices(DeviceType::kCuda)}));
}

}  // namespace

int rank_gpu(const GpuPlacement& p) {
  CLEAVE_CHECK(p.visible_gpus > 0, "device.type \"cuda\": rank {} sees no CUDA device (check the driver and "
               "CUDA_VISIBLE_DEVICES), or set device.type \"cpu\"", p.world_rank);
  // The NCCL world's probe placed each rank by the same rule (comm::select_device) and compared the GPUs' PCI bus
  // ids before it was made, so under NCCL the ranks' GPUs are distinct; the staged MPI world lets ranks share one.
  return comm::gpu_of_local_rank(p.local_rank, p.visible_gpus);
}

RankSetup::RankSetup(config::RunConfig c, comm::Communicator& w, const ops::Backend* backend,
                     std::optional<run_plan::Plan> planned)
    : config(std::move(c)), world(w), grid(make_grid(config, w.size())), coords(grid.coords_of(w.rank())) {
  // The run's own stream, memory and op context: nothing is shared with another run in this process.
  const Device device = run_device(config, w);
  // Once, before anything is made on it: launches and library calls without a guard go to the current device,
  // and the stream below must belong to it (a rank on cuda:1 with cuda:0 current fails at its first launch).
  ops::make_device_current(device);
  stream = ops::make_device_stream(device);
  allocator = ops::make_device_allocator(device, stream->stream());
  if (config.device.memory_limit > 0) allocator->set_limit(config.device.memory_limit);
  if (!device.is_cpu()) pinned = ops::make_pinned_allocator(device);
  resources = ops::make_device_resources(device);
  context.device = device;
  context.stream = &stream->stream();
  context.allocator = allocator.get();
  context.resources = resources.get();
  context.host_waits = &host_waits;
  context.upload_staging = pinned.get();  // null on the CPU
  context.backend = backend;
  context.precision = config.device.precision;  // bf16: mixed precision (ops/context.hpp)
  context.cpu_blas = config.device.blas;
  context.attention_sums = config.device.attention_sums;  // kReordered in verify's twin only (verify_floor.hpp)
  // Deterministic mode: GEMM bits independent of the thread count (shape-fixed slices, OpenBLAS at one
  // thread), so one rank with N threads and N ranks of one thread compute the same bits.
  context.gemm_mode = config.train.deterministic ? ops::GemmMode::kDeterministic : ops::GemmMode::kFast;
  if (config.train.deterministic) ops::configure_cpu_threads(ops::cpu_threads());

  batch = config.resolved_batch();
  groups = comm::build_grid_communicators(world, grid);
  // One model replica: the tp × pp ranks of one (cp, dp) coordinate (each cp rank's replica has its own tokens).
  model_parallel = world.split(coords.cp_rank + grid.cp_size() * coords.dp_rank, world.rank(), "model_parallel");
  // Host waits on device work inside the run's own communicators count in the run's counter (kCommunication);
  // `world` is the caller's and outlives this setup, so it is not handed the counter.
  for (comm::Communicator* c : counted_communicators()) c->count_host_waits(&host_waits);
  if (grid.tp_size() > 1) context.tp_comm = groups.tp.get();
  context.sequence_parallel = config.parallel.sequence_parallel && grid.tp_size() > 1;
  if (grid.cp_size() > 1) {
    context.cp_comm = groups.cp.get();
    context.cp = {grid.cp_size(), coords.cp_rank,
                  config.parallel.context_parallel_comm == config::ContextParallelComm::kRing
                      ? layers::CpExchange::kRing
                      : layers::CpExchange::kAllToAll};
  }
  if (grid.ep_size() > 1) context.ep_comm = groups.ep.get();
  // The plan reads the config, the world size and this machine's CPU kernels, nothing the world made: one made before
  // the world (plan_before_world) is the same plan, taken as it is. Only which stages this rank holds needs the
  // world, the grid coordinate of its rank.
  if (planned) {
    CLEAVE_ASSERT(planned->schedule.pp_size == grid.pp_size() && planned->tp_size == grid.tp_size() &&
                      planned->cp_size == grid.cp_size() &&
                      planned->schedule.num_microbatches == static_cast<int>(batch.gradient_accumulation_steps),
                  "RankSetup: the plan handed in was made for pp {} tp {} cp {} and {} micro-batches, the run is pp {} "
                  "tp {} cp {} with {}",
                  planned->schedule.pp_size, planned->tp_size, planned->cp_size, planned->schedule.num_microbatches,
                  grid.pp_size(), grid.tp_size(), grid.cp_size(), batch.gradient_accumulation_steps);
    plan = *std::move(planned);
    plan.local_stages = plan.stages_on(coords.pp_rank);
  } else {
    plan = run_plan::make_plan(config, static_cast<int>(batch.gradient_accumulation_steps), coords.pp_rank,
                               cpu_kernels_of(config));
  }
}

RankSetup::~RankSetup() {
  for (comm::Communicator* c : counted_communicators()) c->count_host_waits(nullptr);
}

std::vector<comm::Communicator*> RankSetup::counted_communicators() const {
  std::vector<comm::Communicator*> out;
  for (comm::Communicator* c : {groups.tp.get(), groups.dp.get(), groups.pp.get(), groups.embedding.get(),
                                groups.cp.get(), groups.dp_cp.get(), groups.ep.get(), groups.expert_dp.get(),
                                model_parallel.get()}) {
    if (c != nullptr) out.push_back(c);
  }
  return out;
}

run_plan::CpuKernels cpu_kernels_of(const config::RunConfig& config) {
  run_plan::CpuKernels cpu;
  cpu.bf16_gemm = ops::resolved_cpu_gemm(config.device.blas, /*bf16_operands=*/true);
  cpu.threads = ops::cpu_threads();
  return cpu;
}

run_plan::Plan plan_before_world(const config::RunConfig& config, int world_size, std::string_view origin,
                                 const std::vector<std::string>& overrides, const run_plan::HostMemory& host) {
  config::RunConfig resolved = config;
  resolved.resolve(world_size, origin, overrides);
  const auto accumulation = static_cast<int>(resolved.resolved_batch().gradient_accumulation_steps);
  const run_plan::CpuKernels cpu = cpu_kernels_of(resolved);
  // Every plan error is the config's (make_plan reads nothing else); an internal error is no Error and passes.
  run_plan::Plan plan = reading_input([&] {
    try {
      return run_plan::make_plan(resolved, accumulation, 0, cpu);
    } catch (const ConfigKeyError& e) {
      throw InputError(config::keyed_message(e, origin, overrides));
    }
  });
  // The ranks on this host against the memory it allows (physical or cgroup), with or without device.memory_limit (the cap is per rank).
  if (host.limit_bytes > 0) {
    const std::string violation = run_plan::host_fit_violation(run_plan::host_need(plan, resolved, cpu), host);
    CLEAVE_CHECK_INPUT(violation.empty(), "{}", violation);
  }
  return plan;
}

bool RankSetup::counts_loss() const {
  const int last = plan.num_stages() - 1;
  for (int stage : plan.local_stages) {
    if (stage == last) return coords.tp_rank == 0;
  }
  return false;
}

}  // namespace cleave::train
