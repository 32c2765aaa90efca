// CLEAVE_CUDNN_CHECK: cuDNN status codes turned into BackendError naming the statement and cuDNN's own error
// text (CLEAVE_VENDOR_CHECK, engine/core/error.hpp). Separate from cuda_check.hpp so that only files using
// cuDNN need its headers on the include path.
#pragma once

#include <cudnn.h>

#include "engine/core/error.hpp"

#define CLEAVE_CUDNN_CHECK(stmt)                                                                     \
  do {                                                                                               \
    const cudnnStatus_t cleave_cudnn_status_ = (stmt);                                               \
    CLEAVE_VENDOR_CHECK("cuDNN", cleave_cudnn_status_, cleave_cudnn_status_ == CUDNN_STATUS_SUCCESS, \
                        ::cudnnGetErrorString(cleave_cudnn_status_), #stmt);                         \
  } while (0)
