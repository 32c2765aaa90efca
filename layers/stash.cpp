// Stash::clear (layer.hpp). Invariant: no buffer of a stash, or of one of its children, is released while an
// exchange posted into it is still in flight: every Work of the whole tree completes first, then the buffers go.
// (Dropping the last reference to a Work also waits for it, but a Work may be shared, and a caching allocator may
// hand a released buffer to the next allocation at once.) The lists and children keep their memory for the next
// micro-batch (StashChildren, layer.hpp).
#include "engine/comm/communicator.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {
namespace {

void complete_in_flight(Stash& stash) {
  for (const auto& work : stash.in_flight) work->wait();
  for (Stash& child : stash.children) complete_in_flight(child);
}

}  // namespace

void Stash::clear() {
  complete_in_flight(*this);
  in_flight.clear();
  children.clear();
  tensors.clear();
}

}  // namespace cleave::layers
