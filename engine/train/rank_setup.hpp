// RankSetup: what one rank of a training run is, fixed when the run starts: the resolved config, the process
// grid with this rank's coordinates and groups, the plan every rank computes alike (engine/run_plan), the
// batch arithmetic, and the run's own memory and op context. The other parts of a trainer (RankModel,
// StepTail, Trainer) and the free functions over them (checkpoints, gather, generation, run record) read it.
//
// Invariants: every tensor of the run comes from `allocator` (its cap is device.memory_limit, its peak the
// run's peak) except what the host writes before an upload or reads after a download (host_allocator());
// nothing here is shared with another run in the same process; `context` points at this object's stream,
// allocator and resources, so a RankSetup never moves (it is neither copied nor moved).
//
// Placement: device.type "cpu" runs on the CPU; "cuda" (CUDA builds only) puts world rank r on
// cuda:<local rank mod the GPUs it sees> (comm::gpu_of_local_rank, the rule the NCCL world's probe placed it by)
// through the seam's factories (kernels/ops/ops.hpp), so this file includes no CUDA header; the constructor makes
// that device current for the calling thread (ops::make_device_current) before it builds the stream, so the thread
// that constructs a RankSetup is the one that runs its work. The node's GPUs all visible and no more ranks than
// GPUs: cuda:<local rank>; k GPUs bound to each rank (srun --gpus-per-task=k): one of its own (k = 1: cuda:0);
// more ranks than the GPUs they all see: shared round robin, which the staged MPI world allows and the NCCL world
// refuses before it is made (comm::gpu_ownership compares the GPUs' PCI bus ids). rank_gpu states the rule.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/process_grid.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/host_fit.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"

namespace cleave::train {

// The CPU kernels this process runs for `config` (device.blas resolved on this machine for bf16 operands, the
// kernels' threads), as the memory plan reads them (run_plan::CpuKernels): resolved before the plan is made.
run_plan::CpuKernels cpu_kernels_of(const config::RunConfig& config);

// The plan every rank will make, made once before the world and the model are built (`cleave train`, `cleave verify`):
// a config the world size cannot plan (more stages than blocks, a manual split that does not sum, a schedule the
// batch cannot feed), whose memory plan exceeds device.memory_limit, or whose ranks on this host need more than its
// memory allows (physical or its cgroup's limit: run_plan/host_fit.hpp; `host` is this host as the caller read it,
// limit_bytes 0: not checked) is bad input, thrown as InputError naming the keys, the numbers and the fix (exit 64:
// no restart of the same command cures it, so `cleave run` stops at once). The plan is a pure function of the config,
// the world size and this machine's CPU kernels, so every rank refuses alike; it is returned for the RankSetup (its
// local_stages those of pp rank 0: the setup sets its own rank's), so the plan is made once. A refused key is named
// with where it came from (the config read from `origin`, a file name or "<defaults>", with `overrides`): "config
// FILE: key: ..." or "--set k=v: key: ...", as RunConfig::resolve names them.
run_plan::Plan plan_before_world(const config::RunConfig& config, int world_size, std::string_view origin,
                                 const std::vector<std::string>& overrides, const run_plan::HostMemory& host = {});

// What places a rank on a GPU (rank_gpu): the local rank make_world_communicator resolved once (world.options()
// .local_rank, by comm::resolve_local_rank; the world rank in a world made outside the factory) and the GPUs this
// rank sees.
struct GpuPlacement {
  int world_rank = 0;
  int local_rank = 0;
  int visible_gpus = 0;
};

// The CUDA device index of a rank (see Placement above). Pure; throws Error when the rank sees no GPU.
int rank_gpu(const GpuPlacement& placement);

struct RankSetup {
  // `world` must outlive the setup. Resolves the config against world.size(), builds the grid groups
  // (collective), the allocator and context of device.type, and the plan. Throws Error for layouts that
  // cannot work. `backend` (tests only): the slot table the context's ops call instead of the device's
  // (ops::Context::backend), e.g. a recording wrapper; null = the device's backend. `planned`: the plan
  // plan_before_world made of the same config at world.size(), taken instead of making it again; without it the
  // setup makes its own.
  RankSetup(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend = nullptr,
            std::optional<run_plan::Plan> planned = std::nullopt);
  // Clears the run's host-wait counter from the communicators it was handed to, before `host_waits` goes: the
  // groups are members declared before it (destroyed after it), and a communicator that noted a wait while being
  // torn down (a Work completed by its destructor, say) would write into a destroyed counter.
  ~RankSetup();
  RankSetup(const RankSetup&) = delete;
  RankSetup& operator=(const RankSetup&) = delete;

  config::RunConfig config;
  comm::Communicator& world;
  comm::ProcessGrid grid;
  comm::GridCoords coords;
  comm::GridCommunicators groups;
  std::unique_ptr<ops::DeviceStream> stream;           // the run's stream (outlives the allocator ordered on it)
  std::unique_ptr<Allocator> allocator;                // this run's memory: cap, peak, accounting
  std::unique_ptr<Allocator> pinned;                   // page-locked host memory for uploads (null on the CPU)
  std::unique_ptr<ops::DeviceResources> resources;     // backend handles of the run's device
  ops::HostWaits host_waits;                           // the run's host waits (context.host_waits points here)
  layers::Context context;                             // device, allocator, stream, GEMM mode, precision, tp group
  std::unique_ptr<comm::Communicator> model_parallel;  // tp × pp ranks of this replica (norms, losses)
  config::ResolvedBatch batch;
  run_plan::Plan plan;
  // Where the weights came from (train --init-from, or the checkpoint a run resumed): written as index.json
  // "source" of every checkpoint, so export finds a Hugging Face origin's config and tokenizer. Null: a run
  // that started from its own initialisation.
  nlohmann::json source;

  // Host memory for batches before their upload and for host control tensors: the run's own allocator on the
  // CPU (accounted as before), pinned memory on a GPU.
  Allocator& host_allocator() const { return pinned ? *pinned : *allocator; }
  bool on_device() const { return !context.device.is_cpu(); }

  // World rank 0 writes files and logs for the run.
  bool reports() const { return world.rank() == 0; }
  // The stage holding the loss, on tp rank 0: the rank that counts each row's loss once per replica.
  bool counts_loss() const;

 private:
  // The run's own communicators (the groups and model_parallel, not `world`): they count in `host_waits`.
  std::vector<comm::Communicator*> counted_communicators() const;
};

}  // namespace cleave::train
