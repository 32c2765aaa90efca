// Streams and events. On the CPU both are synchronous: work submitted to a stream has finished when the
// call returns, and an event is complete as soon as it is recorded. Code written against these types obeys
// the CUDA ordering rules, so it stays correct when the CUDA backend gives them real asynchrony.
#pragma once

#include "engine/core/device.hpp"

namespace cleave {

class Stream {
 public:
  Stream() = default;
  explicit Stream(Device device, void* native = nullptr) : device_(device), native_(native) {}

  Device device() const { return device_; }
  void* native() const { return native_; }  // cudaStream_t on CUDA, null on CPU
  void synchronize() const;

 private:
  Device device_ = Device::cpu();
  void* native_ = nullptr;
};

class Event {
 public:
  Event() = default;
  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // make `stream` wait for this event (no host block)
  void synchronize() const;               // host blocks until complete
  bool query() const;                     // complete?

 private:
  void* native_ = nullptr;
};

// The default CPU stream.
const Stream& cpu_stream();

}  // namespace cleave
