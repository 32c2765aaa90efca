// See workspace_memory.hpp.
#include "engine/run_plan/workspace_memory.hpp"

#include <algorithm>

#include "engine/run_plan/memory_plan.hpp"
#include "partition/block_work.hpp"

namespace cleave::run_plan {

// CPU mixed precision on the widened GEMM path (CpuKernels::bf16_gemm.bf16_kernels false: device.blas openblas or
// blis, or a CPU without bf16 instructions): a GEMM's three bf16 operands are widened into f32 scratch for the GEMM's
// duration (kernels/ops/cpu_f32_view.hpp, the weight's working copy included), and an op that widens a block's output
// whole holds three such tensors. On oneDNN's bf16 kernels (device.blas auto or onednn on a CPU with bf16
// instructions) the GEMMs widen nothing but a bias row, and the training step's all-bf16 calls of the other ops widen
// per chunk, block or row (kernels/ops/cpu_chunked_view.hpp, rope, kernels/cpu/flash_attention.hpp): the workspace
// is then the attention kernel's scratch (cpu_attention_scratch_bytes). Measured on a CPU with bf16 instructions
// (TrainE2E.Bf16WorkspacePlanMatchesTheAllocator, tiny GPT): 49,608 B at micro-batch 1 and 49,560 B at 4, the
// attention scratch's 49,536 B, where this figure gave 24,576 and 98,304. Bytes for `micro` samples on one tp rank.
std::int64_t cpu_bf16_widening_bytes(const partition::BlockSpec& block, const partition::BlockCost& shard,
                                     partition::Recompute recompute, int tp, std::int64_t micro) {
  const partition::BlockWork work = partition::block_work(block, DType::kBF16, recompute, tp, micro);
  // A grouped GEMM (a mixture's experts, Gemm::groups > 1) is listed at an expert's mean rows, but one expert may
  // receive every token of the micro-batch (a token reaches an expert at most once), and the engine widens one
  // expert's GEMM at a time: its token dimension (m in the forward and input-gradient products, k in the weight
  // gradient's, partition/work_parts.hpp's linear) is taken at every token.
  const double tokens = static_cast<double>(micro * block.seq_len);
  double widest = 0;
  for (const auto* pass : {&work.forward, &work.input_grad, &work.weight_grad}) {
    for (partition::Gemm gemm : pass->gemms) {
      if (gemm.groups > 1) {
        double& rows = pass == &work.weight_grad ? gemm.k : gemm.m;
        rows = std::max(rows, tokens);
      }
      widest = std::max(widest, gemm.operand_bytes(4.0));
    }
  }
  const double samples = static_cast<double>(micro);
  widest = std::max(widest, 3.0 * static_cast<double>(shard.output_bytes) * samples);
  return static_cast<std::int64_t>(widest);
}

CpuKernels unresolved_cpu_kernels(const config::RunConfig& config) {
  CpuKernels cpu;
  cpu.bf16_gemm = ops::choose_cpu_gemm(config.device.blas, /*bf16_operands=*/true,
                                       ops::build_cpu_blas_facts(/*onednn_bf16_instructions=*/false));
  return cpu;
}

// The per-thread floats of kernels/cpu/flash_attention_blocks.hpp (per_thread_floats, its block sizes kFlashBlockQ 64
// and kFlashBlockK 128): the forward's score block, accumulator and row statistics, the backward's two score blocks, D
// of the group's rows and key-block gradients (summed, and a query chunk's share); f32 adds the transposed key (and
// value) blocks; bf16 the dot path's operands (flash_attention_dots.hpp: query rows of pair_dim(hd), key pairs of
// 16-column-padded blocks; for the value products either the dot path's P and dS rounded, rows of pair_dim(keys or
// queries), and pairs of key / query rows, hd padded to 16 columns, or the GEMM path's widened blocks, whichever is
// larger) and the backward's f32 dQ of a kv head's query heads. Then the
// backward's partial dK / dV sums when it runs one task per query chunk (flash_attention_blocks.hpp, chunk_tasks:
// several threads, fewer than twice as many (batch x kv heads) groups and not a multiple of them): chunks x [2, T, hd]
// per group, counted here for 2 threads - 1 groups since the batch is not known. Equal to the kernel's at one thread,
// its bound at more (MemoryPlanCpu.AttentionScratchIsTheKernels, tests/unit/run_plan).
std::int64_t cpu_attention_scratch_bytes(const partition::BlockSpec& block, int threads, bool bf16, std::int64_t groups) {
  if (block.n_heads <= 0 || threads <= 0) return 0;
  const std::int64_t t = block.seq_len, hd = block.in_features / block.n_heads;
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t group = block.n_heads / kv_heads;  // the same at every tp (both are split by it)
  const std::int64_t bq = std::max<std::int64_t>(1, std::min<std::int64_t>(64, t));
  const std::int64_t bk = std::max<std::int64_t>(1, std::min<std::int64_t>(128, t));
  const auto pair_dim = [](std::int64_t n) { return (n + 1) / 2 * 2; };
  const auto padded = [](std::int64_t n) { return (n + 15) / 16 * 16; };
  const std::int64_t rows = bq * pair_dim(hd), pairs = padded(bk) * pair_dim(hd) / 2;
  const std::int64_t key_pairs = padded(hd) * pair_dim(bk) / 2, query_pairs = padded(hd) * pair_dim(bq) / 2;
  const std::int64_t rounded = bq * pair_dim(bk), rounded_t = bk * pair_dim(bq);
  const std::int64_t forward_values = std::max(rounded + key_pairs, bk * hd);
  const std::int64_t backward_values = std::max(key_pairs + 2 * query_pairs + rounded + rounded_t, bk * hd + 2 * bq * hd);
  const std::int64_t forward = bq * bk + bq * hd + 2 * bq, backward = 2 * bq * bk + group * t + 4 * bk * hd;
  const std::int64_t floats =
      bf16 ? std::max(forward + rows + pairs + forward_values,
                      backward + 2 * pairs + 2 * rows + backward_values + group * t * hd + 2 * hd)
           : std::max(forward + hd * bk, backward + 2 * hd * bk);
  const std::int64_t chunk_rows = (std::max<std::int64_t>(256, (t + 3) / 4) + bq - 1) / bq * bq;
  const std::int64_t chunks = std::max<std::int64_t>(1, (t + chunk_rows - 1) / chunk_rows);
  // chunk_tasks (flash_attention_blocks.hpp): groups < 2 threads and not a multiple of them.
  const bool known = groups > 0;
  const bool per_chunk = threads > 1 && chunks > 1 && (!known || (groups < 2 * threads && groups % threads != 0));
  const std::int64_t partials = per_chunk ? (known ? groups : 2 * threads - 1) * chunks * 2 * t * hd : 0;
  return 4 * (threads * floats + partials);
}

std::int64_t cpu_cp_attention_scratch_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp,
                                            bool ring, int threads, bool bf16) {
  if (block.n_heads <= 0 || threads <= 0) return 0;
  if (cp <= 1 || !ring) return cpu_attention_scratch_bytes(block, threads, bf16, attention_kernel_groups(block, micro, tp, cp));
  partition::BlockSpec chunk = block;
  chunk.seq_len = block.seq_len / (2 * cp);
  // The ring runs the kernel on f32 operands in either precision (bf16 ones widened first).
  const std::int64_t part_out = micro * chunk.seq_len * (block.in_features / tp) * 4;
  const std::int64_t part_lse = micro * (block.n_heads / tp) * chunk.seq_len * 4;
  const RingWidened w = ring_widened_bytes(block, micro, tp, cp, bf16);
  // The forward holds the partials and its widened operands, the backward its own: never both.
  return cpu_attention_scratch_bytes(chunk, threads, false) + std::max(part_out + part_lse + w.forward, w.backward);
}

std::int64_t attention_kernel_groups(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp) {
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  return micro * (kv_heads / tp / std::max(cp, 1));
}

RingWidened ring_widened_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool bf16) {
  if (!bf16 || block.n_heads <= 0 || cp <= 1) return {};
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t local = micro * (block.seq_len / cp);
  const std::int64_t q = local * (block.in_features / tp) * 4;                               // [b, T / cp, D / tp] f32
  const std::int64_t kv = local * 2 * (kv_heads * (block.in_features / block.n_heads) / tp) * 4;  // a held K/V block
  // Forward: the queries and the held K/V block widened; backward: q, out and dout and the held K/V block.
  return {q + kv, 3 * q + kv};
}

}  // namespace cleave::run_plan
