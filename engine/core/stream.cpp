// CPU streams and events are synchronous; these are no-ops by design (see stream.hpp). A stream on a CUDA
// device reaching them is a bug (its work would not be waited for): CUDA streams and events are
// cleave::cuda::synchronize / CudaEvent in engine/cuda/stream.hpp, so these assert instead of doing nothing.
#include "engine/core/stream.hpp"

#include "engine/core/error.hpp"

namespace cleave {

void Stream::synchronize() const {
  CLEAVE_ASSERT(device_.is_cpu(), "Stream::synchronize on a {} stream: use cleave::cuda::synchronize (engine/cuda)",
                device_.str());
}
void Event::record(const Stream& stream) {
  CLEAVE_ASSERT(stream.device().is_cpu(), "Event::record on a {} stream: use cleave::cuda::CudaEvent (engine/cuda)",
                stream.device().str());
}
void Event::wait(const Stream& stream) const {
  CLEAVE_ASSERT(stream.device().is_cpu(), "Event::wait on a {} stream: use cleave::cuda::CudaEvent (engine/cuda)",
                stream.device().str());
}
void Event::synchronize() const {}
bool Event::query() const { return true; }

const Stream& cpu_stream() {
  static const Stream stream(Device::cpu());
  return stream;
}

}  // namespace cleave
