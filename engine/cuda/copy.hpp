// Host <-> device tensor copies on a stream (Tensor::copy_from covers CPU <-> CPU only).
//
// Invariant: every copy checks dtype and element count and names both tensors on mismatch; copies between a
// CUDA tensor and pageable host memory behave as CUDA specifies (the host side is staged before the call
// returns); with pinned host memory (PinnedHostAllocator) they are truly asynchronous, and the host tensor
// must stay alive and unmodified until the stream has passed the copy.
#pragma once

#include "engine/core/stream.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::cuda {

// Enqueues dst <- src on `stream` (a CUDA stream). Any combination of CPU and cuda:N tensors.
void copy_async(const Tensor& dst, const Tensor& src, const Stream& stream);

// dst <- src and waits for it: dst holds the data when this returns.
void copy(const Tensor& dst, const Tensor& src, const Stream& stream);

// A new tensor on `allocator`'s device holding a copy of `src`; blocks until the copy has finished.
Tensor to_device(const Tensor& src, Allocator& allocator, MemoryCategory category, const Stream& stream);

// A new CPU tensor (cpu_allocator) holding a copy of `src`; blocks until the copy has finished.
Tensor to_host(const Tensor& src, const Stream& stream);

// Every byte of `t` set to `byte` on `stream` (0xFF makes f32 and bf16 NaN: used to poison outputs).
void fill_bytes_async(const Tensor& t, unsigned char byte, const Stream& stream);

}  // namespace cleave::cuda
