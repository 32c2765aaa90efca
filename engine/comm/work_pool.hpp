// WorkPool: a communicator state's finished Works, kept for its next ops (MpiWork::take, NcclWork::take), so a
// steady-state step allocates no Work. Backend-neutral and host-only; one driving thread takes and gives (the
// communicators' rule), so there is no lock.
//
// Invariants: take() makes a new Work only when none is idle (every Work made so far is in flight); give() never
// allocates: each time take() makes a Work it reserves room for every Work made so far, so the idle list always has
// room for all of them. A Work given back keeps whatever capacity its own vectors grew to.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace cleave::comm::detail {

template <class W>
class WorkPool {
 public:
  // An idle Work, or `make()` (a std::unique_ptr<W>) when none is idle.
  template <class Make>
  std::unique_ptr<W> take(Make&& make) {
    if (idle_.empty()) {
      idle_.reserve(made_ + 1);  // before counting it: a failed reserve leaves the pool as it was
      std::unique_ptr<W> made = std::forward<Make>(make)();
      ++made_;
      return made;
    }
    std::unique_ptr<W> work = std::move(idle_.back());
    idle_.pop_back();
    return work;
  }

  // Back into the pool; no allocation (the reserve in take()).
  void give(std::unique_ptr<W> work) noexcept { idle_.push_back(std::move(work)); }

  // Deletes the idle Works (their owner's destructor, before what they refer to goes).
  void clear() noexcept { idle_.clear(); }

  std::size_t idle() const { return idle_.size(); }
  std::size_t made() const { return made_; }
  std::size_t capacity() const { return idle_.capacity(); }

 private:
  std::vector<std::unique_ptr<W>> idle_;
  std::size_t made_ = 0;
};

}  // namespace cleave::comm::detail
