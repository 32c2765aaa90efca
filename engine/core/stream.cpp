// CPU streams and events are synchronous; these are no-ops by design (see stream.hpp).
#include "engine/core/stream.hpp"

namespace cleave {

void Stream::synchronize() const {}
void Event::record(const Stream&) {}
void Event::wait(const Stream&) const {}
void Event::synchronize() const {}
bool Event::query() const { return true; }

const Stream& cpu_stream() {
  static const Stream stream(Device::cpu());
  return stream;
}

}  // namespace cleave
