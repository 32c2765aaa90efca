// parallel.comm_backend resolution (see comm_backend.hpp).
#include "engine/config/comm_backend.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::config {
namespace {
constexpr const char* kKey = "parallel.comm_backend";
}  // namespace

CommBackendChoice choose_comm_backend(CommBackend requested, const CommBackendFacts& facts) {
  if (requested == CommBackend::kMpi) return {CommBackend::kMpi, "parallel.comm_backend \"mpi\""};
  if (requested == CommBackend::kNccl) {
    CLEAVE_CHECK_KEY(facts.cuda_build, kKey,
                     "\"nccl\" needs a build with CUDA and NCCL, and this cleave was built without them (`cleave "
                     "version` and CMake's dependency table say why); use \"mpi\" or \"auto\"");
    CLEAVE_CHECK_KEY(facts.device_type == DeviceType::kCuda, kKey,
                     "\"nccl\" carries GPU tensors, but device.type is \"{}\"; use \"mpi\" or \"auto\" to train on "
                     "the CPU, or set device.type \"cuda\"",
                     facts.device_type);
    CLEAVE_CHECK_KEY(facts.gpu_per_rank, kKey,
                     "\"nccl\" needs one GPU per rank, but {}; use \"mpi\" (GPU tensors staged through host memory) "
                     "or \"auto\", or launch one rank per GPU",
                     facts.gpu_sharing);
    return {CommBackend::kNccl, "parallel.comm_backend \"nccl\""};
  }
  CLEAVE_ASSERT(requested == CommBackend::kAuto, "unknown CommBackend {}", static_cast<int>(requested));
  if (facts.device_type != DeviceType::kCuda) return {CommBackend::kMpi, fmt::format("auto: device.type is \"{}\"", facts.device_type)};
  if (!facts.cuda_build) return {CommBackend::kMpi, "auto: this build has no CUDA"};
  if (facts.world_size == 1) return {CommBackend::kMpi, "auto: a world of one rank communicates nothing"};
  if (!facts.gpu_per_rank) return {CommBackend::kMpi, fmt::format("auto: {}", facts.gpu_sharing)};
  return {CommBackend::kNccl, "auto: device.type is \"cuda\" and every rank has its own GPU"};
}

}  // namespace cleave::config
