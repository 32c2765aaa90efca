// CLEAVE_NCCL_CHECK: NCCL status codes turned into BackendError naming the statement and the library's own error
// text (built on CLEAVE_VENDOR_CHECK, engine/core/error.hpp). CLEAVE_CUDA_CHECK comes from the CUDA backend's
// engine/cuda/cuda_check.hpp, included here so existing users keep one include.
// CUDA headers: only code under nccl/ (and cuda/) folders includes this file.
#pragma once

#include <nccl.h>

#include "engine/cuda/cuda_check.hpp"

// ncclInProgress is not a failure: it is how calls on a non-blocking communicator say "started".
#define CLEAVE_NCCL_CHECK(stmt)                                                                         \
  do {                                                                                                  \
    const ncclResult_t cleave_nccl_status_ = (stmt);                                                    \
    CLEAVE_VENDOR_CHECK("NCCL", cleave_nccl_status_,                                                    \
                        cleave_nccl_status_ == ncclSuccess || cleave_nccl_status_ == ncclInProgress,    \
                        ::ncclGetErrorString(cleave_nccl_status_), #stmt);                              \
  } while (0)
