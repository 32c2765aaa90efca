// CLEAVE_CUDA_CHECK / CLEAVE_CUBLAS_CHECK / CLEAVE_CUDA_CHECK_LAUNCH: CUDA runtime and cuBLAS(Lt) status codes
// turned into BackendError naming the failing statement (or kernel) and the library's own error text. All are
// built on CLEAVE_VENDOR_CHECK (engine/core/error.hpp); CLEAVE_CUDNN_CHECK lives in cudnn_check.hpp so only
// files that use cuDNN include cudnn.h, and CLEAVE_NCCL_CHECK in engine/comm/nccl/cuda_check.hpp.
//
// Host code only: nvcc cannot compile fmt's compile-time format strings, so .cu files return cudaError_t
// from their launchers and the .cpp next to them checks it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "engine/core/error.hpp"
#include "engine/cuda/cublaslt_library.hpp"

#define CLEAVE_CUDA_CHECK(stmt)                                                          \
  do {                                                                                   \
    const cudaError_t cleave_cuda_status_ = (stmt);                                      \
    CLEAVE_VENDOR_CHECK("CUDA", cleave_cuda_status_, cleave_cuda_status_ == cudaSuccess, \
                        ::cudaGetErrorString(cleave_cuda_status_), #stmt);               \
  } while (0)

// For a launcher's returned status (cudaGetLastError right after the launch): the message names the kernel.
// An earlier asynchronous fault can surface here too; the text says so rather than blaming the kernel alone.
#define CLEAVE_CUDA_CHECK_LAUNCH(status_expr, kernel_name)                                              \
  do {                                                                                                  \
    const cudaError_t cleave_cuda_status_ = (status_expr);                                              \
    CLEAVE_VENDOR_CHECK("CUDA", cleave_cuda_status_, cleave_cuda_status_ == cudaSuccess,                \
                        ::cudaGetErrorString(cleave_cuda_status_),                                      \
                        "launch of " kernel_name " (or an earlier asynchronous error on this device)"); \
  } while (0)

#define CLEAVE_CUBLAS_CHECK(stmt)                                                                        \
  do {                                                                                                   \
    const cublasStatus_t cleave_cublas_status_ = (stmt);                                                 \
    CLEAVE_VENDOR_CHECK("cuBLAS", cleave_cublas_status_, cleave_cublas_status_ == CUBLAS_STATUS_SUCCESS, \
                        ::cleave::cuda::cublaslt().get_status_string(cleave_cublas_status_), #stmt);     \
  } while (0)
