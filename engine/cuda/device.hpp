// CUDA devices: how many there are (or why there are none), selecting one, a scoped guard, properties, and the
// versions of the libraries this build runs against.
//
// Invariant: probing never throws (a machine without a driver or a GPU has 0 devices and a reason), so CPU-only
// hosts can ask; everything that needs a device checks the index first and names the device count on error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <new>
#include <string>

namespace cleave::cuda {

struct DeviceProbe {
  int count = 0;       // visible CUDA devices; 0 when the runtime reports an error
  std::string reason;  // why count is 0 ("no CUDA device", the runtime's error text); empty when count > 0
};
DeviceProbe probe_devices();
int device_count();  // probe_devices().count

int current_device();
void set_device(int index);  // CLEAVE_CHECK: 0 <= index < device_count(), the message names the count

// Whether `index`'s primary context has been initialized in this process (cuDevicePrimaryCtxGetState, reached
// through the runtime's driver entry points: no link to libcuda). Never initializes one; true when it cannot tell.
bool primary_context_active(int index) noexcept;

// What DeviceGuard asks CUDA: the runtime's calls, or stand-ins (tests/unit/cuda/device_guard_test.cpp, no GPU).
struct DeviceCalls {
  cudaError_t (*get_device)(int*) = cudaGetDevice;
  cudaError_t (*set_device)(int) = cudaSetDevice;
  bool (*context_active)(int) noexcept = primary_context_active;
};

// Makes `index` current for a scope and restores the previous device afterwards. Setting the device is
// checked; restoring is not (a destructor must not throw). The std::nothrow form checks nothing, for use in
// destructors and cleanup paths: if the device cannot be made current, the scope runs on the current one.
// The project's one device guard (the NCCL backend uses it too).
//
// A previous device without a primary context is not restored (`index` stays current): since CUDA 12
// cudaSetDevice initializes the device's primary context, so a rank of cuda:1 whose thread still had the default
// cuda:0 (the NCCL world is built before the rank makes its device current) would leave a context on GPU 0 per
// rank (hundreds of MiB each), or, in exclusive-process compute mode, a failed cudaSetDevice as the error the
// next launch's check reports. (PyTorch's device guard defers the same restore.)
class DeviceGuard {
 public:
  explicit DeviceGuard(int index, DeviceCalls calls = {});
  DeviceGuard(int index, const std::nothrow_t&, DeviceCalls calls = {}) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int index_;
  int previous_ = 0;
  DeviceCalls calls_;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int multiprocessors = 0;
  std::int64_t total_memory = 0;  // bytes
  std::string str() const;        // "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"
};
DeviceInfo device_info(int index);

// "CUDA runtime 13.0 (driver 13.0), cuBLASLt 13.0.2, cuDNN 9.19.0 (built against 9.19.0)". Needs no device;
// the driver part reads "no driver" on hosts without one.
std::string library_versions();

}  // namespace cleave::cuda
