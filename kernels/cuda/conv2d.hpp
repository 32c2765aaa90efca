// 2-D convolution, NCHW, square kernel, f32, through cuDNN 9's legacy convolution API (twin of
// kernels/cpu/conv2d.hpp: cross-correlation, weight [out_channels, in_channels, k, k], y [N, C', H', W'] with
// H' = (H + 2p - k) / stride + 1).
//
// Invariants: forward writes y (and adds the bias when given); backward_input overwrites dx; backward_weight
// ACCUMULATES (+=, cuDNN beta = 1) into dw and dbias (dbias may be null). Only deterministic cuDNN algorithms
// with FMA math (true f32 products, no TF32: the CPU numerics contract) are chosen, the fastest the cuDNN
// heuristic ranks first among them; the choice is cached per shape in the ConvContext. Workspace is the
// caller's (conv2d_workspace_size first, CUTLASS style); nothing allocates behind its back. Launch on
// `stream`, no host wait. bf16 tensors are the caller's to widen (the seam's CUDA slot does).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cleave::kernels::cuda {

struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0, out_channels = 0, kernel = 1, stride = 1, padding = 0;
  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
};

enum class ConvPass { kForward, kBackwardInput, kBackwardWeight };

// A cuDNN handle for one device, created on first use and destroyed under a guard for that device, and the
// algorithms chosen per (shape, pass). Not thread-safe (one per run's device resources, as GemmContext).
class ConvContext {
 public:
  explicit ConvContext(int device);
  ~ConvContext();
  ConvContext(const ConvContext&) = delete;
  ConvContext& operator=(const ConvContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// CLEAVE_CHECKs the shape (positive sizes, the kernel fits the padded input), naming the numbers.
void conv2d_check_shape(const Conv2dShape& shape);

// Bytes of device workspace `pass` needs for `shape` (chooses and caches the algorithm).
std::size_t conv2d_workspace_size(ConvContext& context, const Conv2dShape& shape, ConvPass pass);

void conv2d_forward(ConvContext& context, const Conv2dShape& shape, const float* x, const float* w, const float* bias,
                    float* y, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);
void conv2d_backward_input(ConvContext& context, const Conv2dShape& shape, const float* dy, const float* w, float* dx,
                           void* workspace, std::size_t workspace_bytes, cudaStream_t stream);
void conv2d_backward_weight(ConvContext& context, const Conv2dShape& shape, const float* x, const float* dy, float* dw,
                            float* dbias, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace cleave::kernels::cuda
