// BlockWork: the kernels one block's forward, input-gradient and weight-gradient passes launch, for a roofline
// estimate on hardware Cleave has not measured (a shipped GPU profile): each GEMM as m x n x k (times a batch
// count for the per-head attention GEMMs) and the bytes the elementwise work streams through memory
// (LayerNorm, GELU, softmax, residual adds, bias gradients, cross-entropy), for one micro-batch on one
// tensor-parallel rank (Megatron layout, as cost_model.hpp).
//
// Streamed bytes count what a one-kernel-per-op implementation reads and writes: an op of n elements that
// reads x and writes y moves 2n·b, a backward that reads x and dy and writes dx moves 3n·b; biases are fused
// into the GEMM epilogue (their gradients read dy once). GEMM operands and results are not counted there: the
// roofline prices each GEMM at max(FLOPs / rate, (mk + kn + mn)·batch·b / bandwidth). Where the engine fuses two
// ops into one kernel the bytes and the kernel are counted once: the residual add before a block's second RMSNorm
// (ops::add_rmsnorm_forward / _backward_input, layers/residual_norm.hpp) moves 4n·b in F and I, not 3n·b + 2n·b
// and 3n·b + 3n·b (work_parts::add_norm).
// Kernels count the launches of a pass (PassWork::kernels, priced by the profile's kernel_launch_us): one per GEMM
// (its bias in the epilogue), one per elementwise or normalisation op, one per weight-gradient reduction (a bias's,
// a norm's weights), the fused attention kernel one in F and two in I (its dO·O row sums, then the kernel).
// Invariant: the GEMM FLOPs of a pass (2·m·n·k·batch summed) equal the cost model's GEMM FLOPs for that pass
// times the micro-batch, divided by tp (block_work_test checks it against the transformer formulas).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/core/dtype.hpp"
#include "partition/attention_rates.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {

struct Gemm {
  double m = 0, n = 0, k = 0;
  double batch = 1;  // independent GEMMs of this shape launched together (heads x samples)
  // A product inside the fused memory-efficient attention kernel (work_parts::attention_forward / _backward), not a
  // GEMM library call: a roofline profile caps its efficiency (HardwareProfile::attention_efficiency).
  bool fused_attention = false;
  // For a fused product: which pass of the kernel it belongs to and the kernel's shape (sequence length T, head
  // dimension, whether keys are masked: causal or a window), by which a profile's attention_rates price it
  // (HardwareProfile::attention_kernel); work_parts::attention_forward / _backward set them.
  AttentionPass attention_pass = AttentionPass::kNone;
  double attention_seq = 0, attention_head_dim = 0;
  bool attention_causal = false;
  // Separate launches of this shape, each its own library call (a grouped GEMM's groups: ops::grouped_gemm runs one
  // GEMM per expert, one launch each on CUDA): priced one launch at a time (its efficiency that of one launch's
  // work), then times groups. flops() counts all of them; launch_flops(), operand_bytes() and traffic_bytes() one.
  // Last, so that the positional initialisers above keep their meaning.
  double groups = 1;
  double flops() const { return 2.0 * m * n * k * batch * groups; }
  double launch_flops() const { return 2.0 * m * n * k * batch; }
  double operand_bytes(double element_bytes) const { return (m * k + k * n + m * n) * batch * element_bytes; }
  // What the product reads and writes in memory (the roofline's bytes): its three matrices, less the [T, T]-shaped
  // one (the largest) inside the fused attention kernel, which stays on chip (S and P, dS and dP never reach memory).
  double traffic_bytes(double element_bytes) const {
    const double all = m * k + k * n + m * n;
    return (fused_attention ? all - std::max({m * k, k * n, m * n}) : all) * batch * element_bytes;
  }
};

struct PassWork {
  std::vector<Gemm> gemms;
  double stream_bytes = 0;  // elementwise traffic (see the header)
  double kernels = 0;       // kernels launched (see the header)
  double gemm_flops() const;
  PassWork& operator+=(const PassWork& other);
};

struct BlockWork {
  PassWork forward, input_grad, weight_grad;
};

// The work of `block` for a micro-batch of `micro_batch` samples on one of `tp` ranks. Recomputation adds the
// rerun to input_grad: selective the attention core's forward (scores, softmax, P·V), full the block's forward.
// Sequence parallelism (`sequence_parallel`, tp > 1): the ops on the residual stream (a block's norms and residual
// adds, the final norm) run on the rank's T/tp tokens, as layers/parallel/ and Megatron-LM run them.
BlockWork block_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch,
                     bool sequence_parallel = false);

// The attention kernel a simulated run used (`cleave simulate --attention`; the engine itself always runs the
// memory-efficient kind that block_work prices). kProbabilities: the run stores the [T, T] scores and
// probabilities per head (Megatron-LM's fused scale-mask-softmax), kProbabilitiesDropout: and applies attention
// dropout to them (a [T, T] byte mask too).
enum class AttentionKind { kMemoryEfficient, kProbabilities, kProbabilitiesDropout };
std::string_view attention_kind_name(AttentionKind kind);
std::optional<AttentionKind> attention_kind_from(std::string_view name);

// What a probabilities kind costs beyond block_work's memory-efficient attention, over n = micro_batch x
// (n_heads / tp) x T x T score elements of b bytes (zero for a block without attention or for kMemoryEfficient):
//   forward   scale-mask-softmax reads S, writes P: 2·n·b; dropout reads P, writes P' and a byte mask: n·(2b + 1)
//   backward  dropout's gradient reads dP' and the mask, writes dP: n·(2b + 1); softmax's reads P and dP,
//             writes dS: 3·n·b
//   saved     P (n·b), with dropout also P' and the mask (n·(2b + 1) more), for the backward (Korthikanti et al.
//             2022: 5·a·s²·b bytes per layer in 16-bit)
// and its products run over every key, where block_work prices the memory-efficient kernel's over the pairs it
// computes (the causal half or a window, cost_parts::attended_pairs) and reruns S = Q·Kᵀ in the backward:
// `stored_*` are the probabilities kind's GEMMs (forward S, P·V; backward dP, dV, dQ, dK, all [T, T]), `replaced_*`
// the memory-efficient kernel's that block_work counted (forward 2, backward 5 over the visible pairs), so the kind
// costs roofline(stored) - roofline(replaced) more per pass. Recomputation reruns the forward passes inside I
// (selective and full).
struct ProbabilitiesWork {
  double elements = 0;       // n
  double forward_bytes = 0;  // streamed by the forward passes
  double backward_bytes = 0;  // streamed by the backward passes
  double saved_bytes = 0;     // held from F to I (none under recomputation: the rerun rebuilds them)
  PassWork stored_forward, stored_backward;      // the probabilities kind's products
  PassWork replaced_forward, replaced_backward;  // the memory-efficient kernel's, as block_work priced them
  PassWork dropout_forward, dropout_backward;    // of the above, dropout's bytes and kernel (probabilities_dropout)
};
ProbabilitiesWork attention_probabilities_work(const BlockSpec& block, DType dtype, AttentionKind kind, int tp,
                                               std::int64_t micro_batch);

// Kernels a simulated run launched that the engine does not (run options of `cleave simulate --config`, priced on a
// roofline profile; the engine's own loss is one fused kernel per pass and it has no dropout):
//   CrossEntropyKind::kFloat32  Megatron-LM's vocab-parallel cross-entropy (megatron/core/tensor_parallel/
//     cross_entropy.py; the default without --cross-entropy-loss-fusion, and the 2021 code's
//     vocab_parallel_cross_entropy(output.float())) over n = micro_batch x T x V/tp logits of b bytes, one kernel per
//     torch op: F casts to f32 (n(b + 4)), takes the row max (4n), subtracts it in place (8n), exponentiates in place
//     (8n), sums (4n) and normalises in place (8n): n(b + 36) over 6 kernels; I subtracts 1 at the targets (1 kernel,
//     rows only), multiplies by the loss gradient in place (8n) and casts back to b bytes for the head (n(4 + b)):
//     n(b + 12) over 3 kernels (an f32 run has no casts: 32n over 5, 8n over 2). The f32 softmax (4n bytes) is held
//     from F to I; the memory plan does not count it, nor the dropout masks below.
//   CrossEntropyKind::kTorchFloat32  PyTorch's F.cross_entropy over logits cast to f32 (torchtitan at 0413364:
//     the Llama model's `self.output(h).float()`, then train.py's `F.cross_entropy(pred.flatten(0, 1), ...)`:
//     log_softmax + nll_loss), one kernel per op, each tensor read once: F casts to f32 (n(b + 4)), log_softmax
//     (reads 4n, writes 4n), nll_loss gathers the targets (rows only): n(b + 12) over 3 kernels; I: nll_loss's
//     backward zero-fills the f32 gradient (4n) and scatters the targets' −1 (rows only), log_softmax's backward
//     reads the gradient and the output and writes dx (12n), the cast back (n(4 + b)): n(b + 20) over 4 kernels
//     (an f32 run has no casts: 8n over 2, 16n over 3). The f32 logits and log-probabilities (8n) are held from F
//     to I, not in the memory plan.
//   hidden_dropout  dropout on the two residual branches of a transformer layer (a family's sequence-sharded
//     block: gpt, llama, moe) and on the embedding's output
//     (Megatron-LM's --hidden-dropout, default 0.1): a branch's dropout is fused into its bias-dropout-add, so F
//     writes a byte mask (n more bytes over the add block_work counts) and I runs dropout's gradient (reads dy and
//     the mask, writes dx: n(2b + 1), one kernel), n = micro_batch x T x D; the embedding's is a kernel of its own in
//     F and in its backward (n(2b + 1) each). Full recomputation reruns a block's F inside I. The masks (n bytes
//     each) are held from F to I.
//   dense_embedding_grad  the embedding's gradient as PyTorch's dense embedding backward and Megatron-LM's gradient
//     hook make it, per micro-batch: a [rows, D] gradient of the weight's dtype zero-filled (e·b) for the tokens'
//     scatter-add, then added into the f32 main gradient (reads e·b and e·4, writes e·4): e(2b + 8) in W over 2
//     kernels per table, e = (V/tp + P)·D for the vocab-parallel token table and the P learned positions. (The
//     engine scatter-adds the tokens' rows into the gradient, the [T, D] traffic block_work counts.)
//   torch_rmsnorm  PyTorch's eager RMSNorm (torchtitan's norm_type "rmsnorm", torchtitan/models/norms.py at 0413364:
//     `(x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight`) in place of a
//     fused norm kernel, for a llama block's two norms and the final RMSNorm, n = micro_batch x T x D elements of b
//     bytes, one kernel per op, each tensor read once: F the cast n(b + 4), pow 8n, mean 4n, + eps and rsqrt (rows
//     only), the product 8n, the cast back n(4 + b), the weight's product 2nb: n(4b + 28) over 8 kernels; I the
//     weight's product's dx 2nb, the cast n(b + 4), the product's two gradients 8n and 16n (a product and a row sum),
//     rsqrt's (rows), mean's 4n, pow's 12n, the two gradients of x.float() summed 12n, the cast back n(4 + b):
//     n(4b + 60) over 10 kernels; W the weight's gradient (dy times the normalised output, then a column sum): 4nb
//     over 2. Beyond the fused norm block_work counts (F 2nb, I 3nb, W 2nb, a kernel each) these add F n(2b + 28) and
//     7 kernels, I n(b + 60) and 9, W 2nb and 1; full recomputation reruns the F part inside I. The f32 copies autograd
//     holds from F to I are not in the memory plan.
// run_kernels_work gives what they add to block_work's passes (streamed bytes and kernels, no GEMMs; zero for a block
// they do not touch), for a micro-batch on one of tp ranks, so a roofline profile prices block_work + this; under
// sequence parallelism the dropouts run on the rank's T/tp tokens.
enum class CrossEntropyKind { kFused, kFloat32, kTorchFloat32 };
std::string_view cross_entropy_kind_name(CrossEntropyKind kind);
std::optional<CrossEntropyKind> cross_entropy_kind_from(std::string_view name);
struct RunKernels {
  CrossEntropyKind cross_entropy = CrossEntropyKind::kFused;
  bool hidden_dropout = false;
  bool dense_embedding_grad = false;
  bool torch_rmsnorm = false;
  bool any() const {
    return cross_entropy != CrossEntropyKind::kFused || hidden_dropout || dense_embedding_grad || torch_rmsnorm;
  }
};
BlockWork run_kernels_work(const BlockSpec& block, DType dtype, const RunKernels& run, Recompute recompute, int tp,
                           std::int64_t micro_batch, bool sequence_parallel = false);

// What selective recomputation reruns in a simulated run (`cleave simulate --selective-recompute`; the engine's
// own selective reruns the attention core, block_work's Recompute::kSelective):
//   kAttention     the attention core's forward (scores, softmax, P·V), as the engine does
//   kTorchtitanOp  torchtitan's "selective op" policy (torchtitan/parallelisms/parallelize_llama.py at 0413364:
//     inside each checkpointed transformer block it saves the outputs of aten.mm, the flash / efficient SDPA and
//     reduce-scatter, except every second mm): the backward reruns the block's 2nd, 4th, 6th, ... projection GEMM
//     of the forward in launch order (llama: wk, wo, w3 of wq wk wv wo w1 w3 w2) and every elementwise op (norms,
//     rope, SiLU and product, residual adds), but not the attention kernel nor the other GEMMs.
// selective_op_rerun gives kTorchtitanOp's rerun of `block` (appended to input_grad as block_work appends a rerun;
// each GEMM at its own shape): the block's forward less the attention core (what Recompute::kSelective reruns) and
// less the saved GEMMs and their launches; empty for a block that is not a repeated transformer layer (embedding,
// final norm, head: torchtitan checkpoints the TransformerBlocks only).
enum class SelectiveRecompute { kAttention, kTorchtitanOp };
std::string_view selective_recompute_name(SelectiveRecompute kind);
std::optional<SelectiveRecompute> selective_recompute_from(std::string_view name);
PassWork selective_op_rerun(const BlockSpec& block, DType dtype, int tp, std::int64_t micro_batch,
                            bool sequence_parallel = false);

}  // namespace cleave::partition
