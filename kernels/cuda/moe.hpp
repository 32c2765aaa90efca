// Mixture-of-experts routing on the GPU (the CUDA side of ops::moe_gather, moe_combine and
// moe_combine_weight_grad; the CPU twins are kernels/cpu/moe.hpp): gather tokens into expert rows, combine expert
// rows into tokens with their routing weights, and the combine's weight gradient.
//
// Invariant: every output element is computed by one thread from a fixed order of terms (a token's k rows in j
// order; a dot product in the CPU twin's order, moe_dot_order.hpp), each product rounded and added with no FMA, so
// results are deterministic (no atomics) and the CPU twin's bits. Index ranges are the caller's contract (the layer
// builds them); out-of-range indices are not checked on the device. Launch on `stream`, no host wait. Compiled,
// not run on a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

// scale may be null (1).
void moe_gather(ConstFloats x, const std::int32_t* index, const float* scale, Floats out, int64_t rows, int64_t d,
                cudaStream_t stream);
// weight may be null (1).
void moe_combine(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out, int64_t tokens,
                 int64_t k, int64_t d, cudaStream_t stream);
// Each dot in the CPU twin's order of summation: kMoeDotLanes partial sums (moe_dot_order.hpp).
void moe_combine_weight_grad(ConstFloats dy, ConstFloats src, const std::int32_t* rows, float* dweight,
                             int64_t tokens, int64_t k, int64_t d, cudaStream_t stream);

namespace detail {
cudaError_t launch_moe_gather(ConstFloats x, const std::int32_t* index, const float* scale, Floats out, int64_t rows,
                              int64_t d, cudaStream_t stream);
cudaError_t launch_moe_combine(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out,
                               int64_t tokens, int64_t k, int64_t d, cudaStream_t stream);
cudaError_t launch_moe_combine_weight_grad(ConstFloats dy, ConstFloats src, const std::int32_t* rows, float* dweight,
                                           int64_t tokens, int64_t k, int64_t d, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
