// NcclGroup: one ncclGroupStart / ncclGroupEnd pair that closes on every path. NCCL keeps the group depth and the
// group's first error per thread: an ncclSend, ncclRecv or collective that fails inside a group only records its
// error, and the thread stays inside the group until ncclGroupEnd, which reports the error and drops the group's
// queued ops. A check that throws between the two calls would leave the thread inside the group: every later NCCL
// call of that thread, on any communicator, would then be queued and never launched, and the next ncclGroupEnd
// would report the old error.
//
// Invariant: once constructed, ncclGroupEnd is called exactly once: by end() (checked, throws on failure) or by the
// destructor when the scope is left by an exception (unchecked: the exception in flight is the report).
#pragma once

#include "engine/comm/nccl/cuda_check.hpp"

namespace cleave::comm::detail {

class NcclGroup {
 public:
  NcclGroup() { CLEAVE_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // Ends the group (NCCL launches its ops, or returns ncclInProgress on a non-blocking communicator: poll it).
  void end() {
    open_ = false;
    CLEAVE_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

}  // namespace cleave::comm::detail
