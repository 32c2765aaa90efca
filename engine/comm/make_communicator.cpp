// World communicator factory (see make_communicator.hpp). CPU file: the GPU backends are reached through
// headers without CUDA includes, under #if CLEAVE_WITH_CUDA.
#include "engine/comm/make_communicator.hpp"

#include <utility>

#include "cleave/config.hpp"
#include "engine/comm/mpi/local_rank.hpp"
#include "engine/core/error.hpp"

#if CLEAVE_WITH_CUDA
#include "engine/comm/cuda/staged_world.hpp"
#include "engine/comm/nccl/nccl_world.hpp"
#endif

namespace cleave::comm {

World make_world_communicator(const MpiRuntime& runtime, config::CommBackend requested, DeviceType device_type,
                              const CommOptions& given, P2PProgress progress) {
  // The local rank, once, by the one rule (resolve_local_rank): every communicator of the world carries it, so the
  // NCCL probe, the NCCL world and the trainer (train::rank_gpu) place the rank on the same GPU.
  CommOptions options = given;
  {
    MpiOptions probe;
    static_cast<CommOptions&>(probe) = given;
    probe.progress = P2PProgress::kOff;
    options.local_rank = detect_local_rank(*runtime.world(probe)).local_rank;
  }
  MpiOptions mpi_options;
  static_cast<CommOptions&>(mpi_options) = options;
  mpi_options.progress = progress;
  std::unique_ptr<MpiCommunicator> mpi = runtime.world(mpi_options);
  const bool progress_thread = mpi->progress_thread() != nullptr;

  config::CommBackendFacts facts;
  facts.cuda_build = CLEAVE_WITH_CUDA != 0;
  facts.device_type = device_type;
  facts.world_size = mpi->size();
#if CLEAVE_WITH_CUDA
  // Same condition on every rank (same config, same world size), so the collective probe runs everywhere or
  // nowhere. "auto" in a world of one is mpi whatever the GPUs are (choose_comm_backend): nothing to probe.
  const bool auto_alone = requested == config::CommBackend::kAuto && facts.world_size == 1;
  if (requested != config::CommBackend::kMpi && device_type == DeviceType::kCuda && !auto_alone) {
    const GpuPerRank gpus = probe_gpu_per_rank(*mpi, options.local_rank);
    facts.gpu_per_rank = gpus.own;
    facts.gpu_sharing = gpus.detail;
  }
#endif
  World world;
  world.choice = config::choose_comm_backend(requested, facts);
  world.progress_thread = progress_thread;
  if (world.choice.backend == config::CommBackend::kNccl) {
#if CLEAVE_WITH_CUDA
    world.comm = make_nccl_world(*mpi, options);  // bootstraps over `mpi`, which may go afterwards
    return world;
#else
    CLEAVE_ASSERT(false, "choose_comm_backend picked nccl in a build without CUDA");
#endif
  }
#if CLEAVE_WITH_CUDA
  if (device_type == DeviceType::kCuda) {
    world.comm = make_staged_world(std::move(mpi));
    return world;
  }
#endif
  world.comm = std::move(mpi);
  return world;
}

}  // namespace cleave::comm
