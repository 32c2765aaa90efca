// Roofline work of a block's passes (see block_work.hpp): the common block kinds here from work_parts.hpp
// (mirroring cost_model.cpp layer by layer); a family-owned kind through its BlockRules (family.hpp).
#include "partition/block_work.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "partition/cost_parts.hpp"
#include "partition/families/family.hpp"
#include "partition/work_parts.hpp"

namespace cleave::partition {
namespace {

using namespace work_parts;

}  // namespace

double PassWork::gemm_flops() const {
  double sum = 0;
  for (const Gemm& g : gemms) sum += g.flops();
  return sum;
}

PassWork& PassWork::operator+=(const PassWork& other) {
  gemms.insert(gemms.end(), other.gemms.begin(), other.gemms.end());
  stream_bytes += other.stream_bytes;
  kernels += other.kernels;
  return *this;
}

BlockWork block_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch,
                     bool sequence_parallel) {
  CLEAVE_CHECK(tp >= 1 && micro_batch >= 1, "block work: tp {} and micro-batch {} must be >= 1", tp, micro_batch);
  const D b = static_cast<D>(dtype_size(dtype)), micro = static_cast<D>(micro_batch);
  if (const BlockRules* rules = family_block_rules(block.kind)) {
    return rules->work(block, dtype, recompute, tp, micro_batch, sequence_parallel);
  }
  const D seq = sequence_parallel && tp > 1 ? static_cast<D>(tp) : 1;  // the final norm's T/tp tokens
  BlockWork w;
  switch (block.kind) {
    case BlockKind::kEmbedding: {
      const D n = micro * static_cast<D>(block.input.numel() * block.out_features);
      const D tables = block.seq_len > 0 ? 3 : 2;  // with learned positions: two tables read / scattered into
      w.forward.stream_bytes = tables * n * b;
      w.weight_grad.stream_bytes = tables * n * b;
      w.forward.kernels = w.weight_grad.kernels = tables - 1;  // a gather (scatter-add) per table
      return w;
    }
    case BlockKind::kLayerNorm:
    case BlockKind::kRmsNorm: layernorm(w, micro * static_cast<D>(block.input.numel()) / seq, b); return w;
    case BlockKind::kLmHead: {
      const D rows = micro * static_cast<D>(block.input.rows());
      linear(w, rows, static_cast<D>(block.in_features), static_cast<D>(block.out_features / tp), false, b);
      return w;
    }
    case BlockKind::kLinear: {
      const D rows = micro * static_cast<D>(block.input.numel() / block.in_features);
      linear(w, rows, static_cast<D>(block.in_features), static_cast<D>(block.out_features), true, b);
      return w;
    }
    case BlockKind::kRelu:
    case BlockKind::kGelu: pointwise(w, micro * static_cast<D>(block.input.numel()), b); return w;
    case BlockKind::kConv2d: {
      // im2col + GEMM per sample: [C', C·k²] x [C·k², H·W]; the column buffer is written and read.
      const D c = static_cast<D>(block.input[0]), hw = static_cast<D>(block.input[1] * block.input[2]);
      const D co = static_cast<D>(block.out_features), kk = static_cast<D>(block.kernel * block.kernel);
      w.forward.gemms.push_back({co, hw, c * kk, micro});
      w.forward.stream_bytes = 2 * micro * c * kk * hw * b;
      w.input_grad.gemms.push_back({c * kk, hw, co, micro});
      w.input_grad.stream_bytes = 2 * micro * c * kk * hw * b;
      w.weight_grad.gemms.push_back({co, c * kk, hw, micro});
      w.weight_grad.stream_bytes = micro * (2 * c * kk * hw + co * hw) * b;
      w.forward.kernels = w.input_grad.kernels = 2;  // im2col + GEMM; GEMM + col2im
      w.weight_grad.kernels = 3;                     // im2col, GEMM, the bias's reduction
      return w;
    }
    case BlockKind::kMaxPool: {
      const D in = micro * static_cast<D>(block.input.numel()), out = micro * static_cast<D>(block.output.numel());
      w.forward.stream_bytes = (in + 2 * out) * b;
      w.input_grad.stream_bytes = (in + 2 * out) * b;
      w.forward.kernels = w.input_grad.kernels = 1;
      return w;
    }
    case BlockKind::kFlatten: return w;
    case BlockKind::kSoftmaxCrossEntropy: {
      const D n = micro * static_cast<D>(block.input.rows() * (block.input.last() / tp));
      w.forward.stream_bytes = 2 * n * b;     // max pass, exp-sum pass
      w.input_grad.stream_bytes = 2 * n * b;  // reads logits, writes their gradient
      w.forward.kernels = w.input_grad.kernels = 1;  // fused forward; fused backward
      return w;
    }
    default: break;
  }
  CLEAVE_ASSERT(false, "block kind {} has no common work figures (a family-owned kind asks its BlockRules)",
                block_kind_name(block.kind));
}

}  // namespace cleave::partition

namespace cleave::partition {

std::string_view attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kMemoryEfficient: return "memory_efficient";
    case AttentionKind::kProbabilities: return "probabilities";
    case AttentionKind::kProbabilitiesDropout: return "probabilities_dropout";
  }
  return "?";
}

std::optional<AttentionKind> attention_kind_from(std::string_view name) {
  for (AttentionKind k : {AttentionKind::kMemoryEfficient, AttentionKind::kProbabilities, AttentionKind::kProbabilitiesDropout}) {
    if (attention_kind_name(k) == name) return k;
  }
  return std::nullopt;
}

ProbabilitiesWork attention_probabilities_work(const BlockSpec& block, DType dtype, AttentionKind kind, int tp,
                                               std::int64_t micro_batch) {
  CLEAVE_CHECK(tp >= 1 && micro_batch >= 1, "attention probabilities: tp {} and micro-batch {} must be >= 1", tp, micro_batch);
  ProbabilitiesWork w;
  if (kind == AttentionKind::kMemoryEfficient || block.n_heads <= 0 || block.seq_len <= 0) return w;
  const double b = static_cast<double>(dtype_size(dtype)), t = static_cast<double>(block.seq_len);
  const double heads = static_cast<double>(micro_batch) * static_cast<double>(block.n_heads / tp);
  const double dh = static_cast<double>(block.in_features / block.n_heads);
  const bool dropout = kind == AttentionKind::kProbabilitiesDropout;
  w.elements = heads * t * t;
  w.forward_bytes = w.elements * (2 * b + (dropout ? 2 * b + 1 : 0));
  w.backward_bytes = w.elements * (3 * b + (dropout ? 2 * b + 1 : 0));
  w.saved_bytes = w.elements * (b + (dropout ? 2 * b + 1 : 0));
  // The memory-efficient kernel's products over the visible pairs, exactly as block_work prices them.
  const double pairs = cost_parts::attended_pairs(block.seq_len, block.attention_window);
  w.replaced_forward = work_parts::attention_forward(heads, t, dh, b, pairs);
  w.replaced_backward = work_parts::attention_backward(heads, t, dh, b, pairs);
  w.replaced_forward.stream_bytes = w.replaced_backward.stream_bytes = 0;  // the GEMMs only
  // The probabilities kind's: every key, and no rerun of S in the backward.
  w.stored_forward.gemms = {{t, t, dh, heads}, {t, dh, t, heads}};  // S = Q·Kᵀ, O = P·V
  w.stored_backward.gemms = {{t, t, dh, heads}, {t, dh, t, heads}, {t, dh, t, heads}, {t, dh, t, heads}};  // dP, dV, dQ, dK
  // Kernels: the products, scale-mask-softmax (and dropout), their gradients; the fused kernel's 1 and 2 replaced.
  w.stored_forward.kernels = 3 + (dropout ? 1 : 0);
  w.stored_backward.kernels = 5 + (dropout ? 1 : 0);
  if (dropout) {
    w.dropout_forward.stream_bytes = w.elements * (2 * b + 1);
    w.dropout_backward.stream_bytes = w.elements * (2 * b + 1);
    w.dropout_forward.kernels = w.dropout_backward.kernels = 1;
  }
  return w;
}

}  // namespace cleave::partition

namespace cleave::partition {

std::string_view cross_entropy_kind_name(CrossEntropyKind kind) {
  switch (kind) {
    case CrossEntropyKind::kFloat32: return "float32";
    case CrossEntropyKind::kTorchFloat32: return "torch_float32";
    default: return "fused";
  }
}

std::optional<CrossEntropyKind> cross_entropy_kind_from(std::string_view name) {
  for (CrossEntropyKind k : {CrossEntropyKind::kFused, CrossEntropyKind::kFloat32, CrossEntropyKind::kTorchFloat32}) {
    if (cross_entropy_kind_name(k) == name) return k;
  }
  return std::nullopt;
}

BlockWork run_kernels_work(const BlockSpec& block, DType dtype, const RunKernels& run, Recompute recompute, int tp,
                           std::int64_t micro_batch, bool sequence_parallel) {
  CLEAVE_CHECK(tp >= 1 && micro_batch >= 1, "run kernels: tp {} and micro-batch {} must be >= 1", tp, micro_batch);
  const double b = static_cast<double>(dtype_size(dtype)), micro = static_cast<double>(micro_batch);
  const double seq = sequence_parallel && tp > 1 ? tp : 1;  // dropouts on the residual stream's T/tp tokens
  BlockWork w;
  if (run.cross_entropy == CrossEntropyKind::kFloat32 && block.kind == BlockKind::kSoftmaxCrossEntropy) {
    const double n = micro * static_cast<double>(block.input.rows() * (block.input.last() / tp));
    // Beyond block_work's fused kernel (2n·b and 1 kernel per pass), which these replace. An f32 run has no casts.
    const bool cast = dtype != DType::kF32;
    w.forward.stream_bytes = n * ((cast ? b + 4 : 0) + 32) - 2 * n * b;
    w.input_grad.stream_bytes = n * ((cast ? 4 + b : 0) + 8) - 2 * n * b;
    w.forward.kernels = (cast ? 6 : 5) - 1;
    w.input_grad.kernels = (cast ? 3 : 2) - 1;
  }
  if (run.cross_entropy == CrossEntropyKind::kTorchFloat32 && block.kind == BlockKind::kSoftmaxCrossEntropy) {
    const double n = micro * static_cast<double>(block.input.rows() * (block.input.last() / tp));
    const bool cast = dtype != DType::kF32;  // beyond block_work's fused kernel, which these replace
    w.forward.stream_bytes = n * ((cast ? b + 4 : 0) + 8) - 2 * n * b;
    w.input_grad.stream_bytes = n * ((cast ? 4 + b : 0) + 16) - 2 * n * b;
    w.forward.kernels = (cast ? 3 : 2) - 1;
    w.input_grad.kernels = (cast ? 4 : 3) - 1;
  }
  // A family's residual-stream layer (gpt, llama, moe: attention and MLP branches, each ending in a dropout-add).
  const BlockRules* rules = family_block_rules(block.kind);
  if (run.hidden_dropout && rules != nullptr && rules->sequence_sharded) {
    const double n = micro * static_cast<double>(block.seq_len) * static_cast<double>(block.in_features) / seq;
    w.forward.stream_bytes = 2 * n;  // two branches' masks, written by their bias-dropout-adds
    w.input_grad.stream_bytes = 2 * n * (2 * b + 1);
    w.input_grad.kernels = 2;
    if (recompute == Recompute::kFull) w.input_grad += w.forward;
  }
  if (run.hidden_dropout && block.kind == BlockKind::kEmbedding) {
    const double n = micro * static_cast<double>(block.input.numel() * block.out_features) / seq;
    w.forward.stream_bytes = w.weight_grad.stream_bytes = n * (2 * b + 1);
    w.forward.kernels = w.weight_grad.kernels = 1;
  }
  if (run.dense_embedding_grad && block.kind == BlockKind::kEmbedding) {
    const double rows = static_cast<double>(block.vocab_size / tp + std::max<std::int64_t>(0, block.seq_len));
    w.weight_grad.stream_bytes += rows * static_cast<double>(block.out_features) * (2 * b + 8);
    w.weight_grad.kernels += block.seq_len > 0 ? 4 : 2;
  }
  // A family layer's norms on the residual stream (T/tp tokens under sequence parallelism), the final norm.
  const int rms_norms = block.kind == BlockKind::kRmsNorm ? 1 : (rules != nullptr ? rules->rms_norms : 0);
  if (run.torch_rmsnorm && rms_norms > 0) {
    const double norms = rms_norms;
    const double n = rules != nullptr
                         ? micro * static_cast<double>(block.seq_len) * static_cast<double>(block.in_features) / seq
                         : micro * static_cast<double>(block.input.numel()) / seq;
    BlockWork norm;
    norm.forward.stream_bytes = norms * n * (2 * b + 28);
    norm.forward.kernels = norms * 7;
    norm.input_grad.stream_bytes = norms * n * (b + 60);
    norm.input_grad.kernels = norms * 9;
    norm.weight_grad.stream_bytes = norms * 2 * n * b;
    norm.weight_grad.kernels = norms * 1;
    if (recompute == Recompute::kFull && rules != nullptr) norm.input_grad += norm.forward;
    w.forward += norm.forward;
    w.input_grad += norm.input_grad;
    w.weight_grad += norm.weight_grad;
  }
  return w;
}

std::string_view selective_recompute_name(SelectiveRecompute kind) {
  return kind == SelectiveRecompute::kTorchtitanOp ? "torchtitan_op" : "attention";
}

std::optional<SelectiveRecompute> selective_recompute_from(std::string_view name) {
  for (SelectiveRecompute k : {SelectiveRecompute::kAttention, SelectiveRecompute::kTorchtitanOp}) {
    if (selective_recompute_name(k) == name) return k;
  }
  return std::nullopt;
}

PassWork selective_op_rerun(const BlockSpec& block, DType dtype, int tp, std::int64_t micro_batch, bool sequence_parallel) {
  PassWork rerun;
  const BlockRules* rules = family_block_rules(block.kind);
  if (rules == nullptr || !rules->repeated_layer) return rerun;
  CLEAVE_CHECK(rules->dense_projections,
               "selective recompute torchtitan_op: block {} is a {}; the per-op policy is modelled for layers of dense "
               "projections only ({} blocks; torchtitan at 0413364 has no mixture of experts)", block.name,
               enum_name(block.kind), "gpt and llama");
  const BlockWork plain = block_work(block, dtype, Recompute::kNone, tp, micro_batch, sequence_parallel);
  // The attention core's forward: what the engine's selective appends to the input gradient.
  PassWork core = block_work(block, dtype, Recompute::kSelective, tp, micro_batch, sequence_parallel).input_grad;
  core.stream_bytes -= plain.input_grad.stream_bytes;
  core.kernels -= plain.input_grad.kernels;
  int mm = 0;
  double saved = 0;  // saved GEMMs: their launches are not rerun either
  for (const Gemm& g : plain.forward.gemms) {
    if (g.fused_attention) continue;  // the SDPA kernel's products: saved, counted in `core`
    if (++mm % 2 == 0) {
      rerun.gemms.push_back(g);
    } else {
      saved += 1;
    }
  }
  rerun.stream_bytes = plain.forward.stream_bytes - core.stream_bytes;
  rerun.kernels = plain.forward.kernels - core.kernels - saved;
  return rerun;
}

}  // namespace cleave::partition
