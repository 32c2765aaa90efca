// The NCCL half of the world communicator factory (engine/comm/make_communicator.hpp): whether every rank
// has a GPU of its own, and the NCCL world itself. Compiled into cleave_nccl (CUDA builds only); this header
// includes no CUDA or NCCL header so the factory, a CPU file, can call it under #if CLEAVE_WITH_CUDA.
#pragma once

#include <memory>
#include <string>

#include "engine/comm/communicator.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"

namespace cleave::comm {

struct GpuPerRank {
  bool own = false;    // every rank found a device and no two ranks on one host hold the same one
  std::string detail;  // when not: which ranks share which GPU on which host, or why a rank has none
};

// Collective over `world`. Each rank picks its device as NcclCommunicator does (`local_rank`, resolved once by
// make_world_communicator, and the visible devices, launch_env.hpp); the ranks then compare host name and PCI bus id (gpu_ownership,
// launch_env.hpp), before any NCCL communicator exists, so ranks sharing a GPU are named here instead of by
// NCCL's "Duplicate GPU detected" at init. A rank that cannot pick a device still joins the comparison (it
// reports why), so no rank is left waiting.
GpuPerRank probe_gpu_per_rank(const MpiCommunicator& world, int local_rank);

// An NcclCommunicator over `bootstrap`'s members (device from options.local_rank). Collective; `bootstrap` may
// be destroyed afterwards.
std::unique_ptr<Communicator> make_nccl_world(MpiCommunicator& bootstrap, const CommOptions& options);

}  // namespace cleave::comm
