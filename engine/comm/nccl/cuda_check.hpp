// CLEAVE_CUDA_CHECK / CLEAVE_NCCL_CHECK: CUDA runtime and NCCL status codes turned into BackendError naming
// the statement and the library's own error text (built on CLEAVE_VENDOR_CHECK, engine/core/error.hpp).
// CUDA headers: only code under nccl/ (and cuda/) folders includes this file.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/core/error.hpp"

#define CLEAVE_CUDA_CHECK(stmt)                                                                         \
  do {                                                                                                  \
    const cudaError_t cleave_cuda_status_ = (stmt);                                                     \
    CLEAVE_VENDOR_CHECK("CUDA", cleave_cuda_status_, cleave_cuda_status_ == cudaSuccess,                \
                        ::cudaGetErrorString(cleave_cuda_status_), #stmt);                              \
  } while (0)

// ncclInProgress is not a failure: it is how calls on a non-blocking communicator say "started".
#define CLEAVE_NCCL_CHECK(stmt)                                                                         \
  do {                                                                                                  \
    const ncclResult_t cleave_nccl_status_ = (stmt);                                                    \
    CLEAVE_VENDOR_CHECK("NCCL", cleave_nccl_status_,                                                    \
                        cleave_nccl_status_ == ncclSuccess || cleave_nccl_status_ == ncclInProgress,    \
                        ::ncclGetErrorString(cleave_nccl_status_), #stmt);                              \
  } while (0)
