// parallel.comm_backend resolved against what the build and the ranks offer: the one statement of the rule,
// used by config validation (what is known before launch) and by the world communicator factory
// (engine/comm/make_communicator.hpp, which probes the GPUs first). Pure: no MPI, no CUDA.
//
//   "mpi"   always mpi (CPU tensors; GPU tensors staged through pinned host memory).
//   "nccl"  nccl; refused when the build has no CUDA, device.type is not "cuda", or two ranks share a GPU.
//   "auto"  nccl when the build has CUDA, device.type is "cuda", the world has more than one rank and every
//           rank has its own GPU; else mpi. A world of one communicates nothing, so it never depends on NCCL
//           initialising (a single-GPU run uses the staged MPI world).
// A refusal is a ConfigKeyError on parallel.comm_backend that says why and what to use instead.
#pragma once

#include <string>

#include "engine/config/enums.hpp"

namespace cleave::config {

struct CommBackendFacts {
  bool cuda_build = false;         // CLEAVE_WITH_CUDA
  DeviceType device_type = DeviceType::kCpu;  // device.type
  // Every rank has a GPU that no other rank on its host uses. Before launch this is unknown: leave it true
  // and only the build and device rules apply.
  bool gpu_per_rank = true;
  std::string gpu_sharing;  // why not, when gpu_per_rank is false (names the ranks, host and device)
  // Ranks in the world; 0 = not known yet (before launch: config validation), which "auto" treats as more than
  // one.
  int world_size = 0;
};

struct CommBackendChoice {
  CommBackend backend = CommBackend::kMpi;  // kMpi | kNccl, never kAuto
  std::string reason;   // for the log: "auto: device.type is \"cpu\""
};

// Throws ConfigKeyError("parallel.comm_backend", ...) for nccl where it cannot work.
CommBackendChoice choose_comm_backend(CommBackend requested, const CommBackendFacts& facts);

}  // namespace cleave::config
