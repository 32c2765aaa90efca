// Mixture-of-experts routing kernels (moe.hpp): grid-stride loops over output elements; the weight gradient is
// one warp per 32 (token, j) outputs reading rows coalesced and adding each output's products in the CPU twin's
// order (moe_dot_order.hpp). All three give the CPU twin's bits (its order and roundings, no FMA: the gather is one
// multiply). Compiled, not run on a GPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/moe_dot_order.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void moe_gather_kernel(ConstFloats x, const std::int32_t* index, const float* scale, Floats out,
                                  int64_t rows, int64_t d) {
  const int64_t n = rows * d;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t r = i / d, c = i % d;
    const float s = scale != nullptr ? scale[r] : 1.0f;
    store(out, i, s * load(x, static_cast<int64_t>(index[r]) * d + c));
  }
}

// out[t, c] = sum over j of weight[t, j] * src[rows[t, j], c], each product rounded and added in j order with no
// FMA (__fmul_rn, __fadd_rn): the CPU twin's `dst[c] += w * s[c]` from 0 (kernels/cpu/moe.cpp, built without FMA
// contraction), so the result is the CPU's bits. nvcc would otherwise contract `acc += w * x` into an FMA, one
// rounding fewer than the CPU's from the second slot on.
__global__ void moe_combine_kernel(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out,
                                   int64_t tokens, int64_t k, int64_t d) {
  const int64_t n = tokens * d;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t t = i / d, c = i % d;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[t * k + j] : 1.0f;
      acc = __fadd_rn(acc, __fmul_rn(w, load(src, static_cast<int64_t>(rows[t * k + j]) * d + c)));
    }
    store(out, i, acc);
  }
}

// dweight[i] = sum over c of dy[i / k, c] * src[rows[i], c], each product rounded (__fmul_rn) and the products
// added in the CPU twin's order (moe_dot_order.hpp's MoeKernelDotOrder: kMoeDotLanes partial sums over the whole
// vectors' columns, then the
// tail; __fadd_rn, no FMA), so the result is the CPU's bits. Coalesced: a warp owns 32 consecutive outputs; for
// each 32-column chunk it reads each of their two rows with one coalesced load per lane, writes the products into
// a [32 x 33] tile (row r: output r's 32 products), and then lane r adds row r of the tile (the padding column
// keeps both the writes and the reads free of bank conflicts).
__global__ void moe_combine_weight_grad_kernel(ConstFloats dy, ConstFloats src, const std::int32_t* rows,
                                               float* dweight, int64_t tokens, int64_t k, int64_t d) {
  constexpr int kOutputs = launch::kMoeOutputsPerWarp;
  constexpr int kColumns = launch::kMoeColumnsPerTile;
  static_assert(kColumns % kMoeDotLanes == 0, "a chunk starts at a whole vector of the CPU twin");
  constexpr int kWarpsPerBlock = kThreads / kWarp;
  __shared__ float tiles[kWarpsPerBlock][kOutputs][kColumns + 1];
  float(*tile)[kColumns + 1] = tiles[threadIdx.x / kWarp];
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t n = tokens * k;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  // Warp-uniform loops: every lane runs every iteration, so the shuffles and __syncwarp see the full warp.
  for (int64_t first = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp) * kOutputs;
       first < n; first += warps * kOutputs) {
    const int64_t mine = first + lane;  // the output this lane adds up
    const int64_t outputs = n - first < kOutputs ? n - first : kOutputs;
    const std::int32_t my_row = mine < n ? rows[mine] : 0;
    MoeKernelDotOrder dot;
    float acc = 0.0f;  // d == 0: no chunk, the CPU's empty dot
    for (int64_t c0 = 0; c0 < d; c0 += kColumns) {
      const int64_t c = c0 + lane;
      for (int r = 0; r < outputs; ++r) {
        const int64_t i = first + r;
        const std::int32_t row = __shfl_sync(0xffffffffu, my_row, r);
        tile[r][lane] = c < d ? __fmul_rn(load(dy, (i / k) * d + c), load(src, static_cast<int64_t>(row) * d + c))
                              : 0.0f;
      }
      __syncwarp();
      const int columns = d - c0 < kColumns ? static_cast<int>(d - c0) : kColumns;
      dot.add_chunk(tile[lane], columns, c0, d);
      if (c0 + kColumns >= d) acc = dot.finish(tile[lane], c0, d);  // the last chunk holds the tail
      __syncwarp();  // the tile is rewritten by the next chunk or the next outputs
    }
    if (mine < n) dweight[mine] = acc;
  }
}

}  // namespace

cudaError_t launch_moe_gather(ConstFloats x, const std::int32_t* index, const float* scale, Floats out, int64_t rows,
                              int64_t d, cudaStream_t stream) {
  if (rows * d == 0) return cudaSuccess;
  moe_gather_kernel<<<grid_for(rows * d), kThreads, 0, stream>>>(x, index, scale, out, rows, d);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out,
                               int64_t tokens, int64_t k, int64_t d, cudaStream_t stream) {
  if (tokens * d == 0) return cudaSuccess;
  moe_combine_kernel<<<grid_for(tokens * d), kThreads, 0, stream>>>(src, rows, weight, out, tokens, k, d);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine_weight_grad(ConstFloats dy, ConstFloats src, const std::int32_t* rows, float* dweight,
                                           int64_t tokens, int64_t k, int64_t d, cudaStream_t stream) {
  if (tokens * k == 0) return cudaSuccess;
  const LaunchConfig config = launch::moe_weight_grad_tiles(tokens * k);
  moe_combine_weight_grad_kernel<<<to_grid(config), to_block(config), 0, stream>>>(dy, src, rows, dweight, tokens, k,
                                                                                   d);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
