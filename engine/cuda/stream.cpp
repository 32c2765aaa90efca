// CUDA streams and events (stream.hpp).
#include "engine/cuda/stream.hpp"

#include <utility>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::cuda {

CudaStream::CudaStream(int device, StreamPriority priority) {
  // A stream of another device than the current one compiles and creates fine, and then every launch into it
  // fails with "invalid resource handle": refuse it here, where the mistake is made.
  const int current = current_device();
  CLEAVE_ASSERT(current == device,
                "a stream for cuda:{} was requested while cuda:{} is the current device; make cuda:{} current first "
                "(ops::make_device_current, cuda::set_device, or a DeviceGuard around the stream's use)",
                device, current, device);
  int least = 0;
  int greatest = 0;  // numerically lowest = highest priority
  CLEAVE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t native = nullptr;
  CLEAVE_CUDA_CHECK(cudaStreamCreateWithPriority(&native, cudaStreamNonBlocking,
                                                 priority == StreamPriority::kHigh ? greatest : least));
  stream_ = Stream(Device::cuda(device), native);
}

CudaStream::~CudaStream() { destroy(); }

CudaStream::CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, Stream())) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    destroy();
    stream_ = std::exchange(other.stream_, Stream());
  }
  return *this;
}

void CudaStream::destroy() noexcept {
  if (stream_.native() == nullptr) return;
  {
    DeviceGuard guard(stream_.device().index, std::nothrow);  // restores only a device with a context (device.hpp)
    // Pending work still completes: cudaStreamDestroy returns at once and releases the stream when idle.
    cudaStreamDestroy(native());
  }
  stream_ = Stream();
}

void CudaStream::synchronize() const { CLEAVE_CUDA_CHECK(cudaStreamSynchronize(native())); }

cudaStream_t native_stream(const Stream& stream) {
  CLEAVE_ASSERT(stream.device().is_cuda(), "a {} stream was given to CUDA work; pass a CudaStream's stream()",
                stream.device().str());
  return static_cast<cudaStream_t>(stream.native());
}

void synchronize(const Stream& stream) {
  if (stream.device().is_cpu()) return;
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(native_stream(stream)));
}

CudaEvent::CudaEvent(int device, bool timing) : device_(device), timing_(timing) {
  DeviceGuard guard(device);
  CLEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() { destroy(); }

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : device_(other.device_), timing_(other.timing_), event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    destroy();
    device_ = other.device_;
    timing_ = other.timing_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CudaEvent::destroy() noexcept {
  if (event_ == nullptr) return;
  cudaEventDestroy(event_);
  event_ = nullptr;
}

void CudaEvent::record(const Stream& stream) {
  CLEAVE_ASSERT(event_ != nullptr, "record on a moved-from CudaEvent");
  CLEAVE_ASSERT(stream.device() == Device::cuda(device_), "event of cuda:{} recorded on a {} stream", device_,
                stream.device().str());
  CLEAVE_CUDA_CHECK(cudaEventRecord(event_, native_stream(stream)));
}

void CudaEvent::wait(const Stream& stream) const {
  CLEAVE_ASSERT(event_ != nullptr, "wait on a moved-from CudaEvent");
  // Cross-device waits are legal in CUDA; only a CPU stream is refused (native_stream asserts).
  CLEAVE_CUDA_CHECK(cudaStreamWaitEvent(native_stream(stream), event_, 0));
}

void CudaEvent::synchronize() const {
  CLEAVE_ASSERT(event_ != nullptr, "synchronize on a moved-from CudaEvent");
  CLEAVE_CUDA_CHECK(cudaEventSynchronize(event_));
}

cudaError_t query_event(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) cudaGetLastError();  // not-ready is an answer, not an error to leave pending
  return status;
}

bool CudaEvent::query() const {
  CLEAVE_ASSERT(event_ != nullptr, "query on a moved-from CudaEvent");
  const cudaError_t status = query_event(event_);
  if (status == cudaErrorNotReady) return false;
  CLEAVE_CUDA_CHECK(status);
  return true;
}

float CudaEvent::elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
  CLEAVE_ASSERT(start.timing_ && end.timing_, "elapsed_ms needs two events created with timing = true");
  end.synchronize();
  float ms = 0.0f;
  CLEAVE_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace cleave::cuda
