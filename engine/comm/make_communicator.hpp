// The world communicator of a run: the one place that turns parallel.comm_backend into a Communicator.
// Every CLI command that builds a world calls make_world_communicator; nothing else constructs a world.
//
// Choice: config::choose_comm_backend (engine/config/comm_backend.hpp) states the rule; this file supplies
// the facts it needs at launch. In a CUDA build with device.type "cuda" and a backend other than "mpi", the
// ranks first compare their GPUs (a collective; each rank picks its device as NcclCommunicator would and
// the ranks compare host and PCI bus id), so "auto" picks nccl only when every rank has its own GPU and an
// explicit "nccl" on shared GPUs is refused with the ranks named. "auto" in a world of one rank is the staged
// MPI world without a probe: a single-GPU run never depends on NCCL. The result is the same on every rank.
//
// Backends are registered explicitly: the NCCL world (engine/comm/nccl/nccl_world.hpp, library cleave_nccl)
// and the staged MPI world for GPU tensors (engine/comm/cuda/staged_world.hpp, cleave_comm_cuda) are called
// only under `#if CLEAVE_WITH_CUDA`; a CPU build links neither. Collective over MPI_COMM_WORLD: every rank
// calls it with the same arguments.
#pragma once

#include <memory>
#include <string_view>

#include "engine/comm/communicator.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/config/comm_backend.hpp"

namespace cleave::comm {

struct World {
  std::unique_ptr<Communicator> comm;  // over all ranks; comm->backend() is "mpi", "mpi+staging" or "nccl"
  config::CommBackendChoice choice;    // the backend chosen and why (for the log and the resolved config)
  bool progress_thread = false;        // the MPI communicator runs a progress thread (parallel.p2p_progress)
};

// `requested`: parallel.comm_backend; `device_type`: device.type. Throws
// ConfigKeyError on parallel.comm_backend when the request cannot be honoured (the same text on every rank).
// `progress`: parallel.p2p_progress for the MPI communicator (the MPI world, the staged world's MPI carrier,
// and the NCCL bootstrap); throws Error naming the key for "thread" where MPI lacks MPI_THREAD_MULTIPLE.
World make_world_communicator(const MpiRuntime& runtime, config::CommBackend requested, DeviceType device_type,
                              const CommOptions& options, P2PProgress progress = P2PProgress::kAuto);

}  // namespace cleave::comm
