// GPU-per-rank probe and NCCL world for the communicator factory (see nccl_world.hpp).
#include "engine/comm/nccl/nccl_world.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/comm/launch_env.hpp"
#include "engine/comm/mpi/local_rank.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/nccl/nccl_communicator.hpp"

namespace cleave::comm {
namespace {

constexpr std::size_t kRecord = 512;  // one rank's answer: "G<host> <pci bus id>" or "E<why it has no GPU>"

// This rank's answer. Never throws: every rank must reach the allgather.
std::string local_gpu_record(const LocalRank& local) {
  const std::string host = host_name();
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const int device = select_device(local, count, host, visible != nullptr ? visible : "(unset)");
    char bus[64] = {};
    const cudaError_t status = cudaDeviceGetPCIBusId(bus, sizeof bus, device);
    if (status != cudaSuccess) {
      return fmt::format("Ehost {}: cudaDeviceGetPCIBusId(cuda:{}) failed: {}", host, device,
                         cudaGetErrorString(status));
    }
    return fmt::format("G{} {}", host, bus);
  } catch (const std::exception& e) {
    return std::string("E") + e.what();
  }
}

}  // namespace

GpuPerRank probe_gpu_per_rank(const MpiCommunicator& world, int local_rank) {
  const std::string mine = local_gpu_record(LocalRank{local_rank, 0, "make_world_communicator"});
  std::vector<char> send(kRecord, '\0');
  std::memcpy(send.data(), mine.data(), std::min(mine.size(), kRecord - 1));
  const int n = world.size();
  std::vector<char> all(static_cast<std::size_t>(n) * kRecord);
  world.guarded_barrier("probe_gpu_per_rank");
  CLEAVE_MPI_CHECK(
      MPI_Allgather(send.data(), static_cast<int>(kRecord), MPI_CHAR, all.data(), static_cast<int>(kRecord), MPI_CHAR,
                    world.native()));
  std::vector<GpuRecord> records(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const std::string record(all.data() + static_cast<std::size_t>(q) * kRecord);
    GpuRecord& r = records[static_cast<std::size_t>(q)];
    const auto space = record.rfind(' ');
    if (!record.empty() && record[0] == 'G' && space != std::string::npos) {
      r.host = record.substr(1, space - 1);
      r.gpu = record.substr(space + 1);
    } else {
      r.error = record.empty() ? "no answer" : record.substr(1);
    }
  }
  const GpuOwnership verdict = gpu_ownership(records);
  return {verdict.own, verdict.detail};
}

std::unique_ptr<Communicator> make_nccl_world(MpiCommunicator& bootstrap, const CommOptions& options) {
  NcclOptions nccl_options;
  static_cast<CommOptions&>(nccl_options) = options;  // device -1: picked from options.local_rank
  return std::make_unique<NcclCommunicator>(bootstrap, nccl_options);
}

}  // namespace cleave::comm
