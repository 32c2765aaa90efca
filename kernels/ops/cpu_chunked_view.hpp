// Internal to the CPU backend: an element-wise or row-wise f32 kernel run over tensors that may be bf16, in
// chunks that stay in the core's L1/L2 cache (issue 39 part 4).
//
// cpu_f32_view.hpp widens a whole bf16 tensor into f32 scratch, runs the kernel over all of it and narrows the
// whole output back: for a 1M-element activation that is 4 MiB written, read back, written again and read
// again, beyond L2, on every element-wise op of a bf16 step (the measured cause of bf16 steps slower than fp32).
// Here each OpenMP thread widens a chunk of at most kChunkElements into its own buffers, runs the kernel on
// the chunk and narrows the chunk's outputs, so the f32 copies never leave the cache. The buffers are the
// thread's blocks of the caller's KernelScratch (kernels/cpu/kernel_scratch.hpp: the run's, from its
// CpuResources; null = one made for the call), so a steady-state step allocates none and no buffer outlives
// its owner.
//
// Invariant: the results are bit for bit those of the whole-tensor views, for any thread count: the kernel
// must compute every element (or row) from the same element (or row) of its inputs alone, and the casts are
// exact (widening) or per-element (narrowing). All-f32 calls run the kernel once over the whole tensors.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "engine/core/tensor.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/kernel_scratch.hpp"

namespace cleave::ops::cpu_detail {

// f32 elements per buffer: 4 buffers of 2,048 floats are 32 KiB, within Zen 4's 32 KiB L1d and any L2.
inline constexpr std::int64_t kChunkElements = 2048;
// Below this many elements a call is not worth an OpenMP fork/join (kernels/cpu/parallel.hpp's threshold).
inline constexpr std::int64_t kChunkParallelMin = std::int64_t{1} << 15;

struct ChunkIn {
  const Tensor* tensor;
};
struct ChunkOut {
  const Tensor* tensor;
  bool read;  // the kernel reads the output's old values (in place, +=)
};

// Runs kernel(const float* in[NI], float* out[NO], first_row, rows) over `rows` rows of `cols` elements (an
// element-wise kernel: rows = numel, cols = 1). Every tensor holds rows * cols elements, f32 or bf16. `scratch`
// (cpu_scratch(ctx): the run's, or null) holds the chunk buffers of a call with a bf16 tensor.
template <std::size_t NI, std::size_t NO, class Kernel>
void run_chunked(kernels::cpu::KernelScratch* scratch, const std::array<ChunkIn, NI>& ins,
                 const std::array<ChunkOut, NO>& outs, std::int64_t rows, std::int64_t cols, Kernel&& kernel) {
  namespace kc = kernels::cpu;
  bool any_bf16 = false;
  for (const ChunkIn& in : ins) any_bf16 |= in.tensor->dtype() == DType::kBF16;
  for (const ChunkOut& out : outs) any_bf16 |= out.tensor->dtype() == DType::kBF16;
  std::array<const float*, NI> in_ptr{};
  std::array<float*, NO> out_ptr{};
  if (!any_bf16) {
    for (std::size_t i = 0; i < NI; ++i) in_ptr[i] = ins[i].tensor->template data<float>();
    for (std::size_t o = 0; o < NO; ++o) out_ptr[o] = outs[o].tensor->template data<float>();
    kernel(in_ptr, out_ptr, std::int64_t{0}, rows);
    return;
  }
  // A chunk is whole rows; a row longer than kChunkElements is a chunk alone (a larger lease then).
  const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, kChunkElements / std::max<std::int64_t>(cols, 1));
  const std::int64_t chunk_elements = rows_per_chunk * cols;
  const std::int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const bool parallel = rows * cols >= kChunkParallelMin && chunks > 1;
  const auto need = static_cast<std::size_t>(static_cast<std::int64_t>(NI + NO) * chunk_elements);
  kernels::cpu::ScratchFor scratch_for(scratch);
  const kernels::cpu::KernelScratch::Lease lease = scratch_for.get().lease(0, need);
  auto run_chunk = [&](float* buffers, std::int64_t ch) {
    const std::int64_t first = ch * rows_per_chunk;
    const std::int64_t count = std::min(rows_per_chunk, rows - first);
    const std::int64_t offset = first * cols, n = count * cols;
    std::array<const float*, NI> in{};
    std::array<float*, NO> out{};
    for (std::size_t i = 0; i < NI; ++i) {
      const Tensor& t = *ins[i].tensor;
      if (t.dtype() == DType::kF32) {
        in[i] = t.template data<float>() + offset;
      } else {
        float* buf = buffers + static_cast<std::int64_t>(i) * chunk_elements;
        kc::cast_bf16_to_f32(static_cast<const std::uint16_t*>(t.raw_data()) + offset, buf, n);
        in[i] = buf;
      }
    }
    for (std::size_t o = 0; o < NO; ++o) {
      const Tensor& t = *outs[o].tensor;
      if (t.dtype() == DType::kF32) {
        out[o] = t.template data<float>() + offset;
      } else {
        float* buf = buffers + static_cast<std::int64_t>(NI + o) * chunk_elements;
        if (outs[o].read) kc::cast_bf16_to_f32(static_cast<const std::uint16_t*>(t.raw_data()) + offset, buf, n);
        out[o] = buf;
      }
    }
    kernel(in, out, first, count);
    for (std::size_t o = 0; o < NO; ++o) {
      const Tensor& t = *outs[o].tensor;
      if (t.dtype() == DType::kBF16) {
        kc::cast_f32_to_bf16(out[o], static_cast<std::uint16_t*>(t.raw_data()) + offset, n);
      }
    }
  };
  // A team only where one pays and none is active (kernels/cpu/parallel.hpp: `omp parallel if` would still
  // enter OpenMP); otherwise the chunks in order on the calling thread.
  if (!parallel || omp_in_parallel()) {
    float* buffers = lease.thread_block();
    for (std::int64_t ch = 0; ch < chunks; ++ch) run_chunk(buffers, ch);
    return;
  }
#pragma omp parallel
  {
    float* buffers = lease.thread_block();
#pragma omp for schedule(static)
    for (std::int64_t ch = 0; ch < chunks; ++ch) run_chunk(buffers, ch);
  }
}

}  // namespace cleave::ops::cpu_detail
