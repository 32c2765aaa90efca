// Launch geometry of every CUDA kernel (kernels/cuda/launch_config.hpp) on the CPU, no GPU needed: for the test
// shapes (tiny and awkward ones), the benchmark's (GPT-2 124M: batch 4, seq 1024, d_model 768, 12 heads, vocabulary
// 50257, 124M parameters), attention (T 1 at the largest batch, T 8192, T 131072), mixture-of-experts routing
// (top-1 to top-8, widths 1 to 16384) and extremes (2^33 elements, 2^31 rows), every kernel's config is legal on
// sm_80 and sm_90: blocks of 1 to 1024 threads (x, y <= 1024, z <= 64), grids of at least one block with x <= 2^31 - 1
// and y, z <= 65535, dynamic shared memory within the 48 KiB a launch gets without opting in. Also: the grids that
// do not stride cover their work (column tiles cover every column, one partial per row chunk; attention's blocks
// every row, key, head and sample), the MoE weight gradient's tiles, and the workspaces the launchers' callers
// allocate hold what those grids write (bias, layernorm, rmsnorm, sum of squares). And empty problems (an expert
// parallel rank that receives no tokens, an empty chunk, a rank's empty block of a deterministic NCCL reduction)
// launch nothing: a grid computed from a zero size is illegal (or a kernel over null pointers), and without a GPU
// any launch returns an error, so cudaSuccess here means the launcher returned before CUDA.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/nccl/ordered_reduce.hpp"
#include "engine/core/error.hpp"
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/launch_config.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/rmsnorm.hpp"

namespace cleave::testing::launch_config_test {
namespace {

namespace kc = kernels::cuda;
namespace launch = kernels::cuda::launch;

// Compute capability 8.0 and 9.0 alike (CUDA programming guide, "Technical Specifications per Compute Capability").
constexpr int64_t kMaxThreadsPerBlock = 1024;
constexpr int64_t kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1, kMaxGridYZ = 65535;
constexpr int64_t kDefaultDynamicSmem = 48 * 1024;  // more needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize)

struct NamedProblem {
  std::string name;
  launch::Problem problem;
};

// tokens = batch x seq; softmax rows = batch x heads x seq with seq columns; norms and bias over tokens x features;
// cross-entropy over tokens x vocabulary; element-wise ops over the largest tensor of the step.
std::vector<NamedProblem> problems() {
  std::vector<NamedProblem> out;
  auto add = [&](std::string name, int64_t n, int64_t rows, int64_t cols, int64_t tokens, int64_t seq, int64_t dim) {
    out.push_back({std::move(name), launch::Problem{n, rows, cols, tokens, seq, dim}});
  };
  add("one element", 1, 1, 1, 1, 1, 1);
  add("awkward (primes)", 1009, 97, 131, 61, 7, 37);
  // tests/gpu/train's tiny GPT: vocab 67, d_model 32, 4 heads, seq 16, micro-batch 2.
  add("tiny gpt: logits", 2 * 16 * 67, 2 * 16, 67, 2 * 16, 16, 32);
  add("tiny gpt: attention scores", 2 * 4 * 16 * 16, 2 * 4 * 16, 16, 2 * 16, 16, 32);
  // benchmarks/peers/gpt2_124m_gpu.json: batch 4, seq 1024, d_model 768, 12 heads, vocab 50257.
  add("gpt2 124M: logits", int64_t{4} * 1024 * 50257, 4 * 1024, 50257, 4 * 1024, 1024, 768);
  add("gpt2 124M: attention scores", int64_t{4} * 12 * 1024 * 1024, 4 * 12 * 1024, 1024, 4 * 1024, 1024, 768);
  add("gpt2 124M: mlp", int64_t{4} * 1024 * 3072, 4 * 1024, 3072, 4 * 1024, 1024, 768);
  add("gpt2 124M: parameters", 124'439'808, 4 * 1024, 768, 4 * 1024, 1024, 768);
  // Memory-efficient attention: grid (rows or keys, heads, batch); a long sequence with many heads.
  out.push_back({"attention T 8192", launch::Problem{1, 4 * 16 * 8192, 8192, 4 * 8192, 8192, 1024, 16, 4}});
  // Grouped-query attention at T = 1 (decoding-like, every block one row) with the most samples a grid's z allows
  // (the seam refuses more: kernels/ops/cuda/cuda_attention.cpp), and at T 131072 with 64 query heads.
  out.push_back({"attention T 1, batch 65535", launch::Problem{1, 65535 * 32, 1, 65535, 1, 128, 32, 65535}});
  out.push_back({"attention T 131072, 64 heads", launch::Problem{1, 64 * 131072, 131072, 131072, 131072, 128, 64, 1}});
  // Mixture of experts: routed rows = tokens x top_k gathered at the model width (8192 tokens, top-8, width 4096:
  // 2^28 gathered elements), an awkward one (a token routed once, width 1), and 2^24 tokens x top-8 x 16384.
  out.push_back({"moe top-8 width 4096", launch::Problem{1, 8192, 4096, 8192, 1, 4096, 1, 1, 8}});
  out.push_back({"moe top-1 width 1", launch::Problem{1, 1, 1, 1, 1, 1, 1, 1, 1}});
  out.push_back({"moe extreme", launch::Problem{1, int64_t{1} << 24, 16384, int64_t{1} << 24, 1, 16384, 1, 1, 8}});
  // Past every cap: grid-stride loops keep their grids, column tiles their chunk count.
  add("extreme", int64_t{1} << 33, int64_t{1} << 31, int64_t{1} << 20, int64_t{1} << 31, int64_t{1} << 20, 16384);
  return out;
}

std::string dims(const kc::Dims& d) {
  std::ostringstream out;
  out << "(" << d.x << ", " << d.y << ", " << d.z << ")";
  return out.str();
}

TEST(CudaLaunchConfig, EveryKernelsConfigIsLegalOnSm80AndSm90) {
  int checked = 0;
  for (const NamedProblem& np : problems()) {
    for (const kc::KernelLaunch& k : launch::kernel_launches(np.problem)) {
      SCOPED_TRACE(k.kernel + " for " + np.name + ": grid " + dims(k.config.grid) + " block " + dims(k.config.block));
      const kc::Dims& b = k.config.block;
      const kc::Dims& g = k.config.grid;
      EXPECT_GE(b.x, 1);
      EXPECT_GE(b.y, 1);
      EXPECT_GE(b.z, 1);
      EXPECT_LE(b.x, kMaxBlockX);
      EXPECT_LE(b.y, kMaxBlockY);
      EXPECT_LE(b.z, kMaxBlockZ);
      EXPECT_LE(b.count(), kMaxThreadsPerBlock);
      EXPECT_GE(g.x, 1);
      EXPECT_GE(g.y, 1);
      EXPECT_GE(g.z, 1);
      EXPECT_LE(g.x, kMaxGridX);
      EXPECT_LE(g.y, kMaxGridYZ);
      EXPECT_LE(g.z, kMaxGridYZ);
      EXPECT_GE(k.config.dynamic_smem, 0);
      EXPECT_LE(k.config.dynamic_smem, kDefaultDynamicSmem);
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(problems().size() * launch::kernel_launches({}).size()));
}

// One entry per __global__ function of kernels/cuda/*.cu (58; the resource check looks each compiled kernel up
// here by name, so a new kernel without an entry fails there).
TEST(CudaLaunchConfig, TheCatalogueNamesEachKernelOnce) {
  std::set<std::string> names;
  for (const kc::KernelLaunch& k : launch::kernel_launches({})) {
    EXPECT_TRUE(names.insert(k.kernel).second) << k.kernel << " twice";
    EXPECT_EQ(k.kernel.size() > 7 && k.kernel.substr(k.kernel.size() - 7) == "_kernel", true) << k.kernel;
  }
  EXPECT_EQ(names.size(), 63u);  // + sum_squares_exact_kernel, add_rmsnorm_{forward,backward_input}_kernel,
                                 // strided_copy_kernel, ordered_reduce_kernel (engine/comm/nccl)
}

// The attention kernels do not stride: each block owns 8 query rows (forward, dQ) or 16 keys (dK/dV) of one head
// (grid.y) of one sample (grid.z). So grid.x must cover every row or key with no block wholly past the end, and
// grid.y / grid.z must be the heads and the batch exactly: a clamped y or z would leave heads or samples
// uncomputed with no error (the seam refuses a batch or head count above 65535 instead).
TEST(CudaLaunchConfig, AttentionGridsCoverEveryRowHeadAndSample) {
  for (const NamedProblem& np : problems()) {
    const launch::Problem& p = np.problem;
    SCOPED_TRACE(np.name);
    const kc::LaunchConfig rows = launch::flash_query_rows(p.seq, p.heads, p.batch);
    EXPECT_GE(rows.grid.x * launch::kFlashRowsPerBlock, p.seq);
    EXPECT_LT((rows.grid.x - 1) * launch::kFlashRowsPerBlock, p.seq);
    EXPECT_EQ(rows.grid.y, p.heads);
    EXPECT_EQ(rows.grid.z, p.batch);
    EXPECT_EQ(rows.block.x, launch::kFlashRowsPerBlock * launch::kWarp);  // one warp per row
    const kc::LaunchConfig keys = launch::flash_key_rows(p.seq, p.heads, p.batch);
    EXPECT_GE(keys.grid.x * launch::kFlashKeysPerBlock, p.seq);
    EXPECT_LT((keys.grid.x - 1) * launch::kFlashKeysPerBlock, p.seq);
    EXPECT_EQ(keys.grid.y, p.heads);
    EXPECT_EQ(keys.grid.z, p.batch);
  }
}

// The attention kernels do not stride over heads or samples (grid y and z) nor over their row or key blocks (grid x):
// flash_grid_fits accepts exactly the shapes whose grid is legal as computed, and the launchers refuse the others by
// name before any CUDA call (a null pointer is never read), instead of CUDA's "invalid configuration argument".
TEST(CudaLaunchConfig, FlashGridFitsExactlyTheLegalGrids) {
  constexpr int64_t kMaxX = (int64_t{1} << 31) - 1;
  for (int64_t per_block : {launch::kFlashRowsPerBlock, launch::kFlashKeysPerBlock}) {
    for (int64_t len : {int64_t{0}, int64_t{1}, per_block * kMaxX, per_block * kMaxX + 1}) {
      for (int64_t heads : {int64_t{1}, launch::kMaxGridYZ, launch::kMaxGridYZ + 1}) {
        for (int64_t batch : {int64_t{0}, int64_t{1}, launch::kMaxGridYZ, launch::kMaxGridYZ + 1}) {
          const bool legal = (len + per_block - 1) / per_block <= kMaxX && heads <= 65535 && batch <= 65535;
          EXPECT_EQ(launch::flash_grid_fits(len, per_block, heads, batch), legal)
              << "len " << len << " per block " << per_block << " heads " << heads << " batch " << batch;
          if (legal && len > 0 && batch > 0) {
            const kc::LaunchConfig c = per_block == launch::kFlashRowsPerBlock
                                           ? launch::flash_query_rows(len, heads, batch)
                                           : launch::flash_key_rows(len, heads, batch);
            EXPECT_EQ(c.grid.y, heads);
            EXPECT_EQ(c.grid.z, batch);
            EXPECT_GE(c.grid.x * per_block, len);  // every row or key has its block: nothing clamped away
          }
        }
      }
    }
  }
}

TEST(CudaLaunchConfig, FlashAttentionRefusesAnIllegalGridByName) {
  kc::FlashAttentionShape s;
  s.batch = launch::kMaxGridYZ + 1;  // one sample past grid z
  s.q_len = s.kv_len = 4;
  s.q_heads = s.kv_heads = 1;
  s.head_dim = 8;
  s.ld_q = s.ld_k = s.ld_v = s.ld_o = 8;
  const auto refused = [](const std::function<void()>& call, const std::string& what) {
    try {
      call();
      ADD_FAILURE() << what << " accepted a grid past its limits";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("grid y and z"), std::string::npos) << what << ": " << e.what();
    }
  };
  refused([&] { kc::flash_attention_forward(kc::FloatType::kF32, nullptr, nullptr, nullptr, nullptr, nullptr, s,
                                            nullptr); }, "forward, batch 65536");
  s.batch = 2;
  s.q_heads = launch::kMaxGridYZ + 1;  // grid y of the query-row kernels
  refused([&] {
    kc::flash_attention_backward(kc::FloatType::kBF16, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                 nullptr, nullptr, s, false, nullptr, ~std::size_t{0}, nullptr);
  }, "backward, 65536 query heads");
}

// The MoE weight gradient: warp tiles of kMoeOutputsPerWarp outputs, grid-stride over the tiles; each warp's
// [32 x 33] f32 tile is static shared memory, within the 48 KiB a block gets without opting in.
TEST(CudaLaunchConfig, MoeWeightGradTilesStrideOverEveryOutput) {
  constexpr int64_t kWarps = launch::kThreads / launch::kWarp;
  constexpr int64_t kTileBytes = kWarps * launch::kMoeOutputsPerWarp * (launch::kMoeColumnsPerTile + 1) * 4;
  static_assert(kTileBytes == 33792 && kTileBytes <= kDefaultDynamicSmem, "moe.cu's static tiles");
  for (int64_t outputs : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{257}, int64_t{8192} * 8,
                          int64_t{1} << 27, int64_t{1} << 40}) {
    const kc::LaunchConfig c = launch::moe_weight_grad_tiles(outputs);
    SCOPED_TRACE("outputs " + std::to_string(outputs) + ": " + std::to_string(c.grid.x) + " blocks");
    const int64_t per_pass = c.grid.x * kWarps * launch::kMoeOutputsPerWarp;  // outputs one pass of the grid covers
    EXPECT_GE(c.grid.x, 1);
    EXPECT_LE(c.grid.x, launch::kMaxGridBlocks);
    EXPECT_TRUE(per_pass >= outputs || c.grid.x == launch::kMaxGridBlocks);  // the loop takes the rest
    EXPECT_LT((c.grid.x - 1) * kWarps * launch::kMoeOutputsPerWarp, outputs);  // no block without an output
    EXPECT_EQ(c.block.x % launch::kWarp, 0);  // whole warps: the tile loops' shuffles see 32 lanes
  }
}

// Grid-stride loops: grids grow with the work up to kMaxGridBlocks, then stay there (the loop takes the rest).
TEST(CudaLaunchConfig, GridStrideGridsGrowWithTheWorkUpToTheCap) {
  EXPECT_EQ(launch::grid_stride(0).grid.x, 1);
  EXPECT_EQ(launch::grid_stride(1).grid.x, 1);
  EXPECT_EQ(launch::grid_stride(launch::kThreads).grid.x, 1);
  EXPECT_EQ(launch::grid_stride(launch::kThreads + 1).grid.x, 2);
  EXPECT_EQ(launch::grid_stride(launch::kThreads * launch::kMaxGridBlocks).grid.x, launch::kMaxGridBlocks);
  EXPECT_EQ(launch::grid_stride(int64_t{1} << 40).grid.x, launch::kMaxGridBlocks);
  EXPECT_EQ(launch::warp_per_row(launch::kRowsPerBlock + 1).grid.x, 2);
  EXPECT_EQ(launch::warp_per_row(launch::kRowsPerBlock * launch::kMaxGridBlocks * 4).grid.x, launch::kMaxGridBlocks);
  EXPECT_EQ(launch::block_per_row(3, launch::kThreads).grid.x, 3);
  EXPECT_EQ(launch::block_per_row(int64_t{1} << 31, launch::kThreads).grid.x, launch::kMaxGridBlocks);
  // Warp-per-row kernels need whole warps: kThreads is a multiple of the warp.
  EXPECT_EQ(launch::warp_per_row(1).block.x % launch::kWarp, 0);
}

// Column tiles do not stride: grid.x tiles must cover every column and grid.y be the chunk count the partial
// workspace is sized for; the chunks must cover every row.
TEST(CudaLaunchConfig, ColumnTilesCoverTheMatrixAndFitTheirWorkspace) {
  for (const NamedProblem& np : problems()) {
    const int64_t rows = np.problem.rows, cols = np.problem.cols;
    SCOPED_TRACE(np.name + ": [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    const kc::LaunchConfig tiles = launch::column_partial(rows, cols);
    EXPECT_GE(tiles.grid.x * tiles.block.x, cols);
    EXPECT_LT((tiles.grid.x - 1) * tiles.block.x, cols);  // no block entirely past the last column
    const int64_t chunks = launch::column_reduction_chunks(rows);
    EXPECT_EQ(tiles.grid.y, chunks);
    EXPECT_GE(chunks, 1);
    EXPECT_LE(chunks, launch::kMaxChunks);
    const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;  // as the launchers cut them
    EXPECT_GE(rows_per_chunk * chunks, rows);
    const auto floats = static_cast<std::size_t>(chunks * cols) * sizeof(float);
    EXPECT_EQ(kc::bias_backward_workspace_size(rows, cols), floats);
    EXPECT_EQ(kc::rmsnorm_backward_weight_workspace_size(rows, cols), floats);
    EXPECT_EQ(kc::layernorm_backward_weight_workspace_size(rows, cols), 2 * floats);  // gamma and beta partials
    EXPECT_EQ(kc::detail::column_reduction_chunks(rows), chunks);
  }
}

// Empty problems make no CUDA call: the MoE routing ops on 0 tokens, 0 routed slots or width 0 (a rank that receives
// no rows), copy_3d with a zero extent, attention over 0 rows or samples, and the column reductions over 0 rows or
// columns (whose grids column_partial would compute as 0 blocks). Null pointers and the null stream: a launch would
// fail here (no device) and on a GPU (an empty grid, or null operands), so cudaSuccess says none happened.
TEST(CudaLaunchConfig, EmptyProblemsLaunchNothing) {
  namespace d = kc::detail;
  const kc::ConstFloats none_in(nullptr);
  const kc::Floats none_out(nullptr);
  const kc::ConstFloats bf16_in(nullptr, kc::FloatType::kBF16);
  for (int64_t d_model : {int64_t{0}, int64_t{768}}) {
    SCOPED_TRACE("width " + std::to_string(d_model));
    EXPECT_EQ(d::launch_moe_gather(none_in, nullptr, nullptr, none_out, 0, d_model, nullptr), cudaSuccess);
    EXPECT_EQ(d::launch_moe_combine(bf16_in, nullptr, nullptr, none_out, 0, 2, d_model, nullptr), cudaSuccess);
    EXPECT_EQ(d::launch_moe_combine_weight_grad(none_in, bf16_in, nullptr, nullptr, 0, 2, d_model, nullptr),
              cudaSuccess);
    EXPECT_EQ(d::launch_moe_combine_weight_grad(none_in, none_in, nullptr, nullptr, 5, 0, d_model, nullptr),
              cudaSuccess);
  }
  EXPECT_EQ(d::launch_moe_gather(none_in, nullptr, nullptr, none_out, 7, 0, nullptr), cudaSuccess);
  EXPECT_EQ(d::launch_moe_combine(none_in, nullptr, nullptr, none_out, 7, 2, 0, nullptr), cudaSuccess);
  // The checked entry points too (their argument checks accept empty sizes).
  EXPECT_NO_THROW(kc::moe_gather(none_in, nullptr, nullptr, none_out, 0, 64, nullptr));
  EXPECT_NO_THROW(kc::moe_combine(none_in, nullptr, nullptr, none_out, 0, 8, 64, nullptr));
  EXPECT_NO_THROW(kc::moe_combine_weight_grad(none_in, none_in, nullptr, nullptr, 0, 8, 64, nullptr));

  for (const kc::CopyCast cast : {kc::CopyCast::kNone, kc::CopyCast::kF32ToBf16, kc::CopyCast::kBf16ToF32}) {
    for (int zero = 0; zero < 3; ++zero) {
      kc::StridedCopy s{2, 3, 4, 100, 10, 100, 10};
      (zero == 0 ? s.batches : zero == 1 ? s.rows : s.cols) = 0;
      SCOPED_TRACE("cast " + std::to_string(static_cast<int>(cast)) + ", zero extent " + std::to_string(zero));
      EXPECT_EQ(d::launch_strided_copy(nullptr, nullptr, 4, cast, s, nullptr), cudaSuccess);
      EXPECT_NO_THROW(kc::strided_copy(nullptr, nullptr, 4, cast, s, nullptr));
    }
  }

  kc::FlashAttentionShape a;
  a.batch = 2;
  a.q_len = a.kv_len = 0;
  a.q_heads = 4;
  a.kv_heads = 2;
  a.head_dim = 64;
  a.ld_q = a.ld_o = 4 * 64;
  a.ld_k = a.ld_v = 2 * 64;
  EXPECT_NO_THROW(kc::flash_attention_forward(kc::FloatType::kBF16, nullptr, nullptr, nullptr, nullptr, nullptr, a,
                                              nullptr));
  EXPECT_NO_THROW(kc::flash_attention_backward(kc::FloatType::kF32, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, nullptr, nullptr, nullptr, a, true, nullptr, 0, nullptr));
  a.batch = 0;
  a.q_len = a.kv_len = 16;
  EXPECT_NO_THROW(kc::flash_attention_forward(kc::FloatType::kF32, nullptr, nullptr, nullptr, nullptr, nullptr, a,
                                              nullptr));
  EXPECT_NO_THROW(kc::flash_attention_backward(kc::FloatType::kBF16, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, nullptr, nullptr, nullptr, a, false, nullptr, 0, nullptr));
  EXPECT_NO_THROW(kc::attention_merge(kc::FloatType::kF32, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 2, 0,
                                      4, 64, nullptr));
  EXPECT_NO_THROW(kc::attention_merge(kc::FloatType::kBF16, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                      16, 4, 64, nullptr));

  // The NCCL backend's deterministic reduction over this rank's empty block (a bucket of fewer elements than
  // ranks): nccl_collectives.cpp calls it whatever the block's length.
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_EQ(comm::ordered_reduce_on_device(dtype, false, nullptr, 4, 0, nullptr, 0, nullptr), cudaSuccess)
        << dtype_name(dtype);
  }

  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{0, 768}, std::pair<int64_t, int64_t>{4096, 0}}) {
    SCOPED_TRACE("column reduction [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    EXPECT_EQ(d::launch_bias_backward(none_in, nullptr, rows, cols, nullptr, nullptr), cudaSuccess);
    EXPECT_EQ(d::launch_rmsnorm_backward_weight(none_in, none_in, nullptr, nullptr, rows, cols, nullptr, nullptr),
              cudaSuccess);
    EXPECT_EQ(d::launch_layernorm_backward_weight(none_in, none_in, nullptr, nullptr, nullptr, nullptr, rows, cols,
                                                  nullptr, nullptr),
              cudaSuccess);
  }
}

// Sum of squares: one double partial per first-pass block, all summed by the one-block second pass.
TEST(CudaLaunchConfig, SumOfSquaresPartialsFitTheirWorkspace) {
  for (const NamedProblem& np : problems()) {
    const kc::LaunchConfig first = launch::sum_squares_partial(np.problem.n);
    SCOPED_TRACE(np.name + ": n " + std::to_string(np.problem.n) + ", " + std::to_string(first.grid.x) + " blocks");
    EXPECT_LE(first.grid.x, launch::kSumSquaresMaxBlocks);
    EXPECT_EQ(kc::sum_squares_workspace_size(np.problem.n), static_cast<std::size_t>(first.grid.x) * sizeof(double));
    EXPECT_EQ(kc::detail::sum_squares_blocks(np.problem.n), static_cast<unsigned int>(first.grid.x));
  }
}

}  // namespace
}  // namespace cleave::testing::launch_config_test
