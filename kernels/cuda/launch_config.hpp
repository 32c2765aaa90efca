// Launch geometry of the CUDA kernels (kernels/cuda/*.cu): grid, block and dynamic shared memory of every
// launch as pure host functions of the problem sizes. No CUDA include, so the launchers and a CPU test
// (tests/unit/cuda/launch_config_test.cpp) compute the same numbers; common.cuh turns a config into dim3s.
//
// Invariant: every config is legal on each supported device (sm_80, sm_90) for every size a launcher accepts:
// at least one block of at least one thread, block x and y <= 1024, z <= 64 and x*y*z <= 1024 threads, grid x
// <= 2^31 - 1 and y, z <= 65535, and dynamic shared memory <= 48 KiB (more needs cudaFuncSetAttribute, which
// no launcher calls). Grids of grid-stride loops are capped at kMaxGridBlocks, so no grid depends on the size
// beyond that. The test checks the invariant on the test and benchmark shapes and at the extremes.
//
// Adding a kernel: its geometry here (a generic form below, or a function of its own), used by its launcher
// (common.cuh's to_grid / to_block, or grid_for), and its row in kernel_launches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::kernels::cuda {

struct Dims {
  int64_t x = 1;
  int64_t y = 1;
  int64_t z = 1;
  int64_t count() const { return x * y * z; }
};

struct LaunchConfig {
  Dims grid;
  Dims block;
  int64_t dynamic_smem = 0;  // bytes
};

// One launch of a launcher: the kernel's name (as in its .cu) and its config.
struct KernelLaunch {
  std::string kernel;
  LaunchConfig config;
};

namespace launch {

constexpr int kThreads = 256;                     // threads of a 1-D block unless a kernel says otherwise
constexpr int kWarp = 32;
constexpr int64_t kMaxGridBlocks = int64_t{1} << 16;  // grid-stride loops never need more blocks
constexpr int kRowsPerBlock = kThreads / kWarp;   // warp-per-row kernels: one row per warp
constexpr int kTileCols = 32;                     // column-reduction tile: 32 columns x 8 row lanes
constexpr int kTileRows = 8;
constexpr int64_t kMaxChunks = 128;               // column reduction: at most 128 row chunks ...
constexpr int64_t kMinRowsPerChunk = 64;          // ... of at least 64 rows each
constexpr int64_t kSumSquaresPerThread = 8;
constexpr int64_t kSumSquaresMaxBlocks = 1024;    // = 4 * kThreads: the second pass is one block
constexpr int kScanThreads = 1024;                // embedding backward's one-block scan
constexpr int kEmbeddingRowThreads = 128;         // embedding rows: one block of 128 threads per token
constexpr int64_t kFlashRowsPerBlock = kThreads / kWarp;  // flash attention: one query row per warp
constexpr int64_t kFlashKeysPerBlock = 2 * (kThreads / kWarp);  // flash dk/dv: two keys per warp
constexpr int64_t kMaxGridYZ = 65535;
constexpr int kMoeOutputsPerWarp = 32;            // moe_combine_weight_grad: one warp per 32 outputs ...
constexpr int kMoeColumnsPerTile = 32;            // ... their rows read 32 columns at a time (a 32 x 33 f32 tile)

constexpr int64_t clamp_blocks(int64_t blocks, int64_t cap) { return blocks < 1 ? 1 : (blocks > cap ? cap : blocks); }

// A grid-stride loop over n items (n >= 0; n == 0 still gives one block, which the loop skips).
inline LaunchConfig grid_stride(int64_t n, int threads = kThreads) {
  return {{clamp_blocks((n + threads - 1) / threads, kMaxGridBlocks)}, {threads}, 0};
}
// One warp per row, kRowsPerBlock rows per block, grid-stride over the rows (softmax, layernorm, rmsnorm).
inline LaunchConfig warp_per_row(int64_t rows) {
  return {{clamp_blocks((rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxGridBlocks)}, {kThreads}, 0};
}
// One block of `threads` per row, grid-stride over the rows (cross-entropy rows, embedding tokens).
inline LaunchConfig block_per_row(int64_t rows, int threads) {
  return {{clamp_blocks(rows, kMaxGridBlocks)}, {threads}, 0};
}
inline LaunchConfig one_block(int threads) { return {{1}, {threads}, 0}; }

// Column reductions (bias, layernorm and rmsnorm weight gradients): rows cut into this many chunks ...
constexpr int64_t column_reduction_chunks(int64_t rows) {
  const int64_t chunks = (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  return chunks > kMaxChunks ? kMaxChunks : chunks;
}
// ... each chunk of 32 columns summed by one 32 x 8 tile into a [chunks, cols] partial (rows, cols >= 1).
inline LaunchConfig column_partial(int64_t rows, int64_t cols) {
  return {{(cols + kTileCols - 1) / kTileCols, column_reduction_chunks(rows)}, {kTileCols, kTileRows}, 0};
}
// Sum of squares, first pass: kSumSquaresPerThread items per thread, at most kSumSquaresMaxBlocks partials.
inline LaunchConfig sum_squares_partial(int64_t n) {
  return {{clamp_blocks((n + kThreads * kSumSquaresPerThread - 1) / (kThreads * kSumSquaresPerThread),
                        kSumSquaresMaxBlocks)},
          {kThreads},
          0};
}

// Exact sum of squares (sum_squares_exact.cu): the same capped grid as the first sum-of-squares pass.
inline LaunchConfig sum_squares_exact(int64_t n) { return sum_squares_partial(n); }

// Flash attention (flash_attention.cu): blocks over (query rows | keys, heads, batch). grid.y and grid.z are the
// heads and the batch, which the launcher checks against kMaxGridYZ.
inline LaunchConfig flash_query_rows(int64_t q_len, int64_t heads, int64_t batch) {
  return {{clamp_blocks((q_len + kFlashRowsPerBlock - 1) / kFlashRowsPerBlock, (int64_t{1} << 31) - 1), heads, batch},
          {kThreads},
          0};
}
inline LaunchConfig flash_key_rows(int64_t kv_len, int64_t kv_heads, int64_t batch) {
  return {{clamp_blocks((kv_len + kFlashKeysPerBlock - 1) / kFlashKeysPerBlock, (int64_t{1} << 31) - 1), kv_heads,
           batch},
          {kThreads},
          0};
}

// Whether flash_query_rows(len, heads, batch) (len query rows) or flash_key_rows (len keys) is a legal grid as
// given: the kernels stride over nothing, so heads and batch must fit grid y and z (kMaxGridYZ) and the row or key
// blocks grid x without the clamp above. The launchers refuse a shape this rejects (flash_attention.cpp) instead of
// CUDA's "invalid configuration argument" naming no size.
constexpr bool flash_grid_fits(int64_t len, int64_t per_block, int64_t heads, int64_t batch) {
  return len >= 0 && heads >= 1 && batch >= 0 && heads <= kMaxGridYZ && batch <= kMaxGridYZ &&
         (len + per_block - 1) / per_block <= (int64_t{1} << 31) - 1;
}

// The NCCL backend's rank-ordered reduction (engine/comm/nccl/ordered_reduce.cu, deterministic mode): a grid-stride
// loop over the `count` elements of this rank's block, one thread per element at a time.
inline LaunchConfig ordered_reduce(int64_t count) { return grid_stride(count); }

// Mixture-of-experts routing weights' gradient (moe.cu): one warp per kMoeOutputsPerWarp outputs, grid-stride
// over those warp tiles; each warp keeps one [32 x 33] f32 tile in static shared memory (4,224 B, 33,792 B a block).
inline LaunchConfig moe_weight_grad_tiles(int64_t outputs) {
  const int64_t per_block = int64_t{kMoeOutputsPerWarp} * (kThreads / kWarp);
  return {{clamp_blocks((outputs + per_block - 1) / per_block, kMaxGridBlocks)}, {kThreads}, 0};
}

// ---- Every kernel's launch for one problem (the catalogue the CPU test and the resource check read) ---------
// The sizes a launcher sees; a launcher returns before launching on empty sizes, so each field is >= 1 here.
struct Problem {
  int64_t n = 1;       // elements of an element-wise op (adamw, sgd, casts, gelu, relu, swiglu, rope pairs, maxpool;
                       // the ordered reduction's elements of one rank's block)
  int64_t rows = 1;    // rows of a row op (softmax: batch x heads x seq; norms, bias, cross-entropy: tokens)
  int64_t cols = 1;    // their columns (softmax: seq; norms, bias: features; cross-entropy: vocabulary shard)
  int64_t tokens = 1;  // embedding: batch x seq ids
  int64_t seq = 1;     // position embedding: sequence length
  int64_t dim = 1;     // embedding width
  int64_t heads = 1;   // attention: heads (query heads; kv heads for the dk/dv kernel) ...
  int64_t batch = 1;   // ... and batch; seq is the sequence length
  int64_t top_k = 1;   // mixture of experts: experts per token (routed rows = tokens x top_k)
};

// Each __global__ function of kernels/cuda/*.cu and engine/comm/nccl/ordered_reduce.cu, by name, with the config
// its launcher gives it for `p` (one entry per kernel; the templated ones launch with the same config for every
// type). A kernel missing here is caught by the resource check (tests/gpu/static), which looks every compiled kernel
// up by name.
inline std::vector<KernelLaunch> kernel_launches(const Problem& p) {
  const LaunchConfig elementwise = grid_stride(p.n);
  const LaunchConfig block_rows = block_per_row(p.rows, kThreads);
  const LaunchConfig token_rows = block_per_row(p.tokens, kEmbeddingRowThreads);
  return {
      {"adamw_kernel", elementwise},                                // adamw.cu
      {"flash_forward_kernel", flash_query_rows(p.seq, p.heads, p.batch)},  // flash_attention.cu
      {"flash_backward_dot_kernel", warp_per_row(p.batch * p.heads * p.seq)},
      {"flash_backward_dq_kernel", flash_query_rows(p.seq, p.heads, p.batch)},
      {"flash_backward_dkdv_kernel", flash_key_rows(p.seq, p.heads, p.batch)},
      {"attention_merge_kernel", warp_per_row(p.batch * p.heads * p.seq)},
      {"bias_add_forward_kernel", grid_stride(p.rows * p.cols)},    // bias.cu
      {"bias_partial_kernel", column_partial(p.rows, p.cols)},
      {"bias_final_kernel", grid_stride(p.cols)},
      {"forward_kernel", block_rows},                               // cross_entropy.cu
      {"mean_loss_kernel", one_block(kThreads)},
      {"backward_scale_kernel", one_block(kThreads)},
      {"backward_kernel", block_rows},
      {"shard_max_kernel", block_rows},
      {"shard_sum_exp_and_target_kernel", block_rows},
      {"loss_rows_kernel", grid_stride(p.rows)},
      {"shard_argmax_kernel", block_rows},
      {"count_correct_kernel", one_block(kThreads)},
      {"elementwise_kernel", elementwise},                          // elementwise.cu
      {"sum_squares_partial_kernel", sum_squares_partial(p.n)},
      {"sum_squares_final_kernel", one_block(kThreads)},
      {"sum_squares_exact_kernel", sum_squares_exact(p.n)},  // sum_squares_exact.cu
      {"cast_f32_to_bf16_kernel", elementwise},
      {"cast_bf16_to_f32_kernel", elementwise},
      {"strided_copy_kernel", elementwise},                         // ops::copy_3d: batches x rows x cols
      {"scale_matrix_kernel", grid_stride(p.rows * p.cols)},       // gemm with k == 0: C [rows, cols] scaled
      {"embedding_forward_kernel", token_rows},                     // embedding.cu
      {"count_kernel", grid_stride(p.tokens)},
      {"scan_kernel", one_block(kScanThreads)},
      {"scatter_kernel", grid_stride(p.tokens)},
      {"rank_kernel", grid_stride(p.tokens)},
      {"bucket_sum_kernel", token_rows},
      {"position_forward_kernel", grid_stride(p.tokens * p.dim)},
      {"position_backward_kernel", grid_stride(p.seq * p.dim)},
      {"gelu_forward_kernel", elementwise},                         // gelu.cu
      {"gelu_backward_kernel", elementwise},
      {"layernorm_forward_kernel", warp_per_row(p.rows)},           // layernorm.cu
      {"layernorm_backward_input_kernel", warp_per_row(p.rows)},
      {"layernorm_weight_partial_kernel", column_partial(p.rows, p.cols)},
      {"layernorm_weight_final_kernel", grid_stride(p.cols)},
      {"maxpool_forward_kernel", elementwise},                      // maxpool.cu
      {"maxpool_backward_kernel", elementwise},
      {"ordered_reduce_kernel", ordered_reduce(p.n)},              // engine/comm/nccl/ordered_reduce.cu
      {"moe_gather_kernel", grid_stride(p.tokens * p.top_k * p.dim)},  // moe.cu: routed rows x width
      {"moe_combine_kernel", grid_stride(p.tokens * p.dim)},
      {"moe_combine_weight_grad_kernel", moe_weight_grad_tiles(p.tokens * p.top_k)},
      {"relu_forward_kernel", elementwise},                         // relu.cu
      {"relu_backward_kernel", elementwise},
      {"rmsnorm_forward_kernel", warp_per_row(p.rows)},             // rmsnorm.cu
      {"rmsnorm_backward_input_kernel", warp_per_row(p.rows)},
      {"add_rmsnorm_forward_kernel", warp_per_row(p.rows)},
      {"add_rmsnorm_backward_input_kernel", warp_per_row(p.rows)},
      {"rmsnorm_weight_partial_kernel", column_partial(p.rows, p.cols)},
      {"rmsnorm_weight_final_kernel", grid_stride(p.cols)},
      {"rope_pack_qkv_kernel", elementwise},                        // rope.cu
      {"rope_pack_qkv_backward_kernel", elementwise},
      {"sgd_plain_kernel", elementwise},                            // sgd.cu
      {"sgd_momentum_kernel", elementwise},
      {"softmax_forward_kernel", warp_per_row(p.rows)},             // softmax.cu
      {"softmax_backward_kernel", warp_per_row(p.rows)},
      {"sum_in_order_kernel", one_block(1)},                        // sum_squares_many.cu
      {"swiglu_forward_kernel", elementwise},                       // swiglu.cu
      {"swiglu_backward_kernel", elementwise},
  };
}

}  // namespace launch
}  // namespace cleave::kernels::cuda
