// CUDA streams and events behind the engine's Stream/Event contract (engine/core/stream.hpp): work submitted
// to a stream runs in submission order; an event recorded on a stream completes when the work before it has;
// wait() orders another stream after it without blocking the host.
//
// CudaStream owns a cudaStream_t on one device and hands out the engine-wide view `stream()` (device cuda:N,
// native() = the cudaStream_t), which kernels and communicators take. A Stream on a CUDA device whose native
// pointer is null means the legacy default stream. CudaEvent owns a cudaEvent_t. Both are move-only and
// destroy their handle on the device they were created on. None of these block the host except
// synchronize() and CudaEvent::elapsed_ms.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/core/stream.hpp"

namespace cleave::cuda {

enum class StreamPriority { kNormal, kHigh };  // kHigh: e.g. pipeline P2P, so transfers overtake compute

class CudaStream {
 public:
  // A non-blocking stream (no implicit ordering with the legacy default stream) on cuda:`device`, which must be
  // the calling thread's current device (CLEAVE_ASSERT, naming both): kernels, library calls and allocations
  // issued without a guard go to the current device, so a stream of another one fails at its first launch
  // ("invalid resource handle"). A run makes its device current once (ops::make_device_current).
  explicit CudaStream(int device, StreamPriority priority = StreamPriority::kNormal);
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  const Stream& stream() const { return stream_; }
  cudaStream_t native() const { return static_cast<cudaStream_t>(stream_.native()); }
  int device() const { return stream_.device().index; }
  void synchronize() const;  // host blocks until everything submitted so far has finished

 private:
  void destroy() noexcept;
  Stream stream_;
};

// The cudaStream_t behind an engine stream. CLEAVE_ASSERT: the stream is on a CUDA device (a CPU stream here
// is a bug: CPU work would silently run unordered with the GPU's).
cudaStream_t native_stream(const Stream& stream);

// Host blocks until `stream` is idle. A CPU stream is always idle (its work ran when it was submitted).
void synchronize(const Stream& stream);

// cudaEventQuery without its side effect on the calling thread: returns cudaSuccess (fired), cudaErrorNotReady
// (pending) or the error, and never leaves not-ready as the thread's last error (CUDA does, and every launcher
// returns cudaGetLastError(), so the next launch on the thread would report "device not ready" as its own
// failure). Another error is left as CUDA left it. The tree's one cudaEventQuery (tests/scripts/cuda_call_lint.sh).
cudaError_t query_event(cudaEvent_t event);

class CudaEvent {
 public:
  // timing = false creates the event with cudaEventDisableTiming (cheaper record/wait).
  explicit CudaEvent(int device, bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(const Stream& stream);      // captures the work submitted to `stream` so far
  void wait(const Stream& stream) const;  // later work on `stream` waits for it; the host does not block
  void synchronize() const;               // host blocks until the captured work has finished
  bool query() const;                     // finished? (an event never recorded counts as finished)
  cudaEvent_t native() const { return event_; }
  int device() const { return device_; }

  // Milliseconds between two timing events, both recorded and finished (blocks until `end` has).
  static float elapsed_ms(const CudaEvent& start, const CudaEvent& end);

 private:
  void destroy() noexcept;
  int device_ = 0;
  bool timing_ = false;
  cudaEvent_t event_ = nullptr;
};

}  // namespace cleave::cuda
