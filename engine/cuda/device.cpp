// Device probing, selection and library versions (device.hpp).
#include "engine/cuda/device.hpp"

#include <cuda.h>
#include <cudnn.h>

#include "engine/core/allocator.hpp"
#include "engine/cuda/cuda_check.hpp"

namespace cleave::cuda {

DeviceProbe probe_devices() {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the next checked call
    probe.reason =
        fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
    return probe;
  }
  probe.count = count;
  if (count == 0) probe.reason = "cudaGetDeviceCount reports 0 CUDA devices";
  return probe;
}

int device_count() { return probe_devices().count; }

int current_device() {
  int index = 0;
  CLEAVE_CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

void set_device(int index) {
  const DeviceProbe probe = probe_devices();
  CLEAVE_CHECK(index >= 0 && index < probe.count, "cuda:{} requested but {} CUDA device(s) are visible{}{}", index,
               probe.count, probe.reason.empty() ? "" : ": ", probe.reason);
  CLEAVE_CUDA_CHECK(cudaSetDevice(index));
}

bool primary_context_active(int index) noexcept {
  using DeviceGet = CUresult (*)(CUdevice*, int);
  using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
  struct Entries {
    DeviceGet device_get = nullptr;
    PrimaryCtxGetState get_state = nullptr;
  };
  static const Entries entries = [] {
    Entries e;
    void* device_get = nullptr;
    void* get_state = nullptr;
    cudaDriverEntryPointQueryResult found_get = cudaDriverEntryPointSymbolNotFound;
    cudaDriverEntryPointQueryResult found_state = cudaDriverEntryPointSymbolNotFound;
    const bool ok =
        cudaGetDriverEntryPointByVersion("cuDeviceGet", &device_get, 12000, cudaEnableDefault, &found_get) ==
            cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &get_state, 12000, cudaEnableDefault,
                                         &found_state) == cudaSuccess &&
        found_get == cudaDriverEntryPointSuccess && found_state == cudaDriverEntryPointSuccess;
    if (!ok) {
      cudaGetLastError();  // not knowing is an answer (true below), not an error for the next checked call
      return e;
    }
    e.device_get = reinterpret_cast<DeviceGet>(device_get);
    e.get_state = reinterpret_cast<PrimaryCtxGetState>(get_state);
    return e;
  }();
  if (entries.get_state == nullptr) return true;
  CUdevice device{};
  unsigned int flags = 0;
  int active = 1;
  if (entries.device_get(&device, index) != CUDA_SUCCESS) return true;
  if (entries.get_state(device, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

DeviceGuard::DeviceGuard(int index, DeviceCalls calls) : index_(index), calls_(calls) {
  CLEAVE_CUDA_CHECK(calls_.get_device(&previous_));
  if (previous_ != index_) CLEAVE_CUDA_CHECK(calls_.set_device(index_));
}

DeviceGuard::DeviceGuard(int index, const std::nothrow_t&, DeviceCalls calls) noexcept : index_(index), calls_(calls) {
  if (calls_.get_device(&previous_) != cudaSuccess) {
    previous_ = index_;  // nothing to restore
    return;
  }
  if (previous_ != index_ && calls_.set_device(index_) != cudaSuccess) previous_ = index_;
}

DeviceGuard::~DeviceGuard() {
  // Only a device this process has initialized: restoring another would initialize its primary context (header).
  if (previous_ != index_ && calls_.context_active(previous_)) calls_.set_device(previous_);
}

std::string DeviceInfo::str() const {
  return fmt::format("cuda:{} {} (sm_{}{}, {} SMs, {})", index, name, major, minor, multiprocessors,
                     format_bytes(total_memory));
}

DeviceInfo device_info(int index) {
  const DeviceProbe probe = probe_devices();
  CLEAVE_CHECK(index >= 0 && index < probe.count, "device_info(cuda:{}): {} CUDA device(s) are visible{}{}", index,
               probe.count, probe.reason.empty() ? "" : ": ", probe.reason);
  cudaDeviceProp prop{};
  CLEAVE_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory = static_cast<std::int64_t>(prop.totalGlobalMem);
  return info;
}

namespace {
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
// cuBLASLt and cuDNN 9 encode theirs as 10000 * major + 100 * minor + patch.
std::string library_version_text(std::size_t v) {
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}
}  // namespace

std::string library_versions() {
  int runtime = 0;
  int driver = 0;
  const bool have_runtime = cudaRuntimeGetVersion(&runtime) == cudaSuccess;
  const bool have_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  cudaGetLastError();
  return fmt::format("CUDA runtime {} ({}), cuBLASLt {}, cuDNN {} (built against {}.{}.{})",
                     have_runtime ? cuda_version_text(runtime) : "unknown",
                     have_driver ? "driver " + cuda_version_text(driver) : std::string("no driver"),
                     library_version_text(cublaslt().get_version()), library_version_text(cudnnGetVersion()),
                     CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
}

}  // namespace cleave::cuda
