// parallel.comm_backend resolution (see comm_backend.hpp).
#include "engine/config/comm_backend.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::config {
namespace {
constexpr const char* kKey = "parallel.comm_backend";
}  // namespace

CommBackendChoice choose_comm_backend(std::string_view requested, const CommBackendFacts& facts) {
  if (requested == "mpi") return {"mpi", "parallel.comm_backend \"mpi\""};
  if (requested == "nccl") {
    CLEAVE_CHECK_KEY(facts.cuda_build, kKey,
                     "\"nccl\" needs a build with CUDA and NCCL, and this cleave was built without them (`cleave "
                     "version` and CMake's dependency table say why); use \"mpi\" or \"auto\"");
    CLEAVE_CHECK_KEY(facts.device_type == "cuda", kKey,
                     "\"nccl\" carries GPU tensors, but device.type is \"{}\"; use \"mpi\" or \"auto\" to train on "
                     "the CPU, or set device.type \"cuda\"",
                     facts.device_type);
    CLEAVE_CHECK_KEY(facts.gpu_per_rank, kKey,
                     "\"nccl\" needs one GPU per rank, but {}; use \"mpi\" (GPU tensors staged through host memory) "
                     "or \"auto\", or launch one rank per GPU",
                     facts.gpu_sharing);
    return {"nccl", "parallel.comm_backend \"nccl\""};
  }
  CLEAVE_CHECK_KEY(requested == "auto", kKey, "\"{}\" is not one of \"auto\", \"mpi\", \"nccl\"", requested);
  if (facts.device_type != "cuda") return {"mpi", fmt::format("auto: device.type is \"{}\"", facts.device_type)};
  if (!facts.cuda_build) return {"mpi", "auto: this build has no CUDA"};
  if (!facts.gpu_per_rank) return {"mpi", fmt::format("auto: {}", facts.gpu_sharing)};
  return {"nccl", "auto: device.type is \"cuda\" and every rank has its own GPU"};
}

}  // namespace cleave::config
