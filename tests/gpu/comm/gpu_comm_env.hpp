// Shared pieces of the NCCL tests: the MPI runtime from the test main and host <-> device copies.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::testing {

comm::MpiRuntime& gpu_mpi_runtime();

// Sets `devices` to the CUDA devices this process sees; returns why a test needing one must skip ("" when one is
// visible): "no CUDA device visible (<status>): <need>".
inline std::string no_cuda_device(int& devices, const std::string& need) {
  devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaSuccess && devices > 0) return "";
  return "no CUDA device visible (" + std::string(status == cudaSuccess ? "0 devices" : cudaGetErrorString(status)) +
         "): " + need;
}

template <typename T>
void upload(const Tensor& device_tensor, const std::vector<T>& host) {
  CLEAVE_ASSERT(host.size() * sizeof(T) == device_tensor.nbytes(), "upload size");
  CLEAVE_CUDA_CHECK(cudaMemcpy(device_tensor.raw_data(), host.data(), device_tensor.nbytes(), cudaMemcpyHostToDevice));
}

template <typename T>
std::vector<T> download(const Tensor& device_tensor) {
  std::vector<T> host(device_tensor.nbytes() / sizeof(T));
  CLEAVE_CUDA_CHECK(cudaMemcpy(host.data(), device_tensor.raw_data(), device_tensor.nbytes(), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace cleave::testing
