// Memory-efficient multi-head attention on the CPU: FlashAttention-2's blockwise algorithm with an online
// softmax (docs/ops.md "Attention" has the math), over single-threaded BLAS GEMMs on small blocks.
//
// Layout: every operand is a stack of row-major [len, *] matrices, one per batch entry (batch stride len * ld),
// and the pointer addresses head 0's first column; head h of q / out / dout / dq starts h * head_dim columns
// further, head g of k / v / dk / dv likewise. Query head h reads key/value head h / (q_heads / kv_heads).
// lse is [batch, q_heads, q_len] f32.
//
// Invariants: forward writes every row of out and lse (a row with no visible key: out 0, lse -inf); backward
// writes (or with accumulate adds into) every element of dq, dk, dv of the covered heads. The forward threads
// over (batch, head, query block), the backward over (batch, kv head) or, where those leave threads idle, (batch,
// kv head, query chunk); dk and dv of a key block sum the chunks' shares (chunks fixed by q_len) in chunk order
// either way, so the bits depend neither on the thread count nor on the batch and head split. Scratch comes from
// the caller (`workspace`, flash_attention_workspace_floats floats); nothing allocates.
//
// bf16 operands (bit patterns, cast.hpp; lse stays f32): the score products Q K^T and dO V^T take the bf16 blocks as
// they are, summing their exact products in f32 on the CPU's bf16 dot-product instruction where it has one (or FMA
// paths with its bits, flash_attention_dots.hpp); the value products take P and dS rounded to bf16, on the dot
// instruction where the CPU has it, else on the f32 block GEMM (FlashValuePath); rows are narrowed as they are stored,
// with f32 statistics and accumulation throughout (FlashAttentionBf16Test.MatchesDoubleReference: half a bf16 ulp of the
// double result plus half an ulp of the terms' magnitudes, plus the f32 kernel's error). Not the bits of the f32
// kernel on widened operands: the score products sum in another order, and P and dS are rounded.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cleave::kernels::cpu {

struct FlashAttentionShape {
  int64_t batch = 0, q_len = 0, kv_len = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ld_q = 0, ld_k = 0, ld_v = 0, ld_o = 0;  // row strides (elements); dq/dk/dv/dout share q/k/v/out's
  int64_t q_offset = 0, k_offset = 0;             // global positions of query row 0 and key row 0
  int64_t window = 0;                             // sliding window, <= 0: none (causal only)
  bool causal = true;
  float scale = 1.0f;
  // f32 kernel only: P and dS rounded to bf16 before the value products, as the bf16 kernel rounds them (its f32
  // GEMM value path: the same roundings, in place), for f32 operands that hold bf16 values (a block of a bf16
  // attention run in pieces: ring attention). The bf16 overloads always round and ignore it.
  bool round_probabilities = false;
  // Rows of a key block (at most kv_len either way); 0: kFlashBlockK. Another value changes only where the forward's
  // online softmax merges partial blocks (the rescaling of its f32 sums at a new running maximum) and how the
  // backward's dQ groups its f32 block sums: `cleave verify`'s twin reference halves it (ops::AttentionSums, ring
  // attention merges its blocks likewise). Tests pick shapes on its edges.
  int64_t key_block = 0;
};

// Block sizes (rows of a query block, rows of a key block). Public so tests can pick shapes on their edges.
inline constexpr int64_t kFlashBlockQ = 64;
inline constexpr int64_t kFlashBlockK = 128;

// Floats of workspace for `threads` OpenMP threads (forward and backward share the bound); bf16: for the bf16
// overloads (the dot path's operands, the widened blocks and the backward's per-task f32 dQ, group * q_len *
// head_dim per thread). Where the backward runs a task per query chunk (several threads, q_len over 256, fewer
// batch x kv heads groups than twice the threads and not a multiple of them), also its partial dK and dV sums:
// chunks (at most 4) x 2 x kv_len x head_dim floats per group.
std::size_t flash_attention_workspace_floats(const FlashAttentionShape& shape, int threads, bool bf16 = false);

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                             const FlashAttentionShape& shape, float* workspace, int threads);

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const FlashAttentionShape& shape,
                              bool accumulate, float* workspace, int threads);

// Where the bf16 kernel's value products (P V; backward P^T dO, dS K, dS^T Q) run, P and dS rounded to bf16 either
// way: kAuto picks from the CPU (flash_attention_dots.hpp, value_products_for): the bf16 dot path where the CPU has
// the bf16 dot instruction (AVX-512 BF16), else the f32 block GEMM on the rounded P and dS (stored in f32) and the
// widened blocks. The two give different bits (each independent of the thread count and the head split); tests force
// each.
enum class FlashValuePath { kAuto, kDots, kGemm };

void flash_attention_forward(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                             std::uint16_t* out, float* lse, const FlashAttentionShape& shape, float* workspace,
                             int threads, FlashValuePath value_path = FlashValuePath::kAuto);

void flash_attention_backward(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                              const std::uint16_t* out, const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                              std::uint16_t* dk, std::uint16_t* dv, const FlashAttentionShape& shape, bool accumulate,
                              float* workspace, int threads, FlashValuePath value_path = FlashValuePath::kAuto);

// Partial results merged by their log-sum-exp (ops::attention_merge): rows = batch * heads * len, out rows
// [batch, len, heads * head_dim]; out / lse may alias out_a / lse_a.
void attention_merge(const float* out_a, const float* lse_a, const float* out_b, const float* lse_b, float* out,
                     float* lse, int64_t batch, int64_t len, int64_t heads, int64_t head_dim);

}  // namespace cleave::kernels::cpu
