// Per-block cost model (formulas and counting rules in cost_model.hpp).
//
// Composite blocks are the sum of their parts, built from the same small helpers the layer structure
// mirrors (linear, layernorm, gelu, attention), so a change to one layer's stash is one change here.
#include "partition/cost_model.hpp"

#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

constexpr std::int64_t kStatBytes = 4;  // f32 statistics, i32 ids / targets / argmax

struct Parts {
  double fwd = 0, in = 0, wt = 0;
  std::int64_t params = 0;
  std::int64_t act_float = 0;  // float elements stashed (× b)
  std::int64_t act_fixed = 0;  // bytes of f32 / i32 stashed

  Parts& operator+=(const Parts& o) {
    fwd += o.fwd;
    in += o.in;
    wt += o.wt;
    params += o.params;
    act_float += o.act_float;
    act_fixed += o.act_fixed;
    return *this;
  }
};

// y[rows, out] = x[rows, in] · Wᵀ (+ bias); stashes x.
Parts linear(std::int64_t rows, std::int64_t in, std::int64_t out, bool bias) {
  const double gemm = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  Parts p;
  p.fwd = gemm + (bias ? static_cast<double>(rows * out) : 0.0);
  p.in = gemm;
  p.wt = gemm + (bias ? static_cast<double>(rows * out) : 0.0);
  p.params = in * out + (bias ? out : 0);
  p.act_float = rows * in;
  return p;
}

// Stashes x, mean and rstd.
Parts layernorm(std::int64_t rows, std::int64_t cols) {
  const double n = static_cast<double>(rows * cols);
  Parts p;
  p.fwd = 8 * n;
  p.in = 10 * n;
  p.wt = 5 * n;
  p.params = 2 * cols;
  p.act_float = rows * cols;
  p.act_fixed = 2 * rows * kStatBytes;
  return p;
}

// Stashes its input.
Parts gelu(std::int64_t n) {
  Parts p;
  p.fwd = 8.0 * static_cast<double>(n);
  p.in = 12.0 * static_cast<double>(n);
  p.act_float = n;
  return p;
}

Parts relu(std::int64_t n) {
  Parts p;
  p.fwd = static_cast<double>(n);
  p.in = static_cast<double>(n);
  p.act_float = n;
  return p;
}

// Core attention on qkv [T, 3D] -> [T, D]; stashes qkv and the probabilities [H, T, T].
Parts attention(std::int64_t t, std::int64_t d, std::int64_t heads) {
  const double td = static_cast<double>(t) * static_cast<double>(t) * static_cast<double>(d);
  const double scores = static_cast<double>(heads) * static_cast<double>(t) * static_cast<double>(t);
  Parts p;
  p.fwd = 2 * (2 * td) + 5 * scores;  // Q·Kᵀ, P·V, softmax
  p.in = 4 * (2 * td) + 5 * scores;   // dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q, softmax backward
  p.act_float = 3 * t * d + heads * t * t;
  return p;
}

Parts residual_add(std::int64_t n) {
  Parts p;
  p.fwd = static_cast<double>(n);
  p.in = static_cast<double>(n);  // the residual gradient is summed into the branch gradient
  return p;
}

Parts transformer(const BlockSpec& b) {
  const std::int64_t t = b.seq_len, d = b.in_features, f = b.d_ff, h = b.n_heads;
  CLEAVE_ASSERT(t > 0 && d > 0 && f > 0 && h > 0, "transformer block {} has unset sizes", b.name);
  Parts p = layernorm(t, d);
  p += linear(t, d, 3 * d, true);
  p += attention(t, d, h);
  p += linear(t, d, d, true);
  p += residual_add(t * d);
  p += layernorm(t, d);
  p += linear(t, d, f, true);
  p += gelu(t * f);
  p += linear(t, f, d, true);
  p += residual_add(t * d);
  return p;
}

// Stashes x and rstd.
Parts rmsnorm(std::int64_t rows, std::int64_t cols) {
  const double n = static_cast<double>(rows * cols);
  Parts p;
  p.fwd = 4 * n;
  p.in = 6 * n;
  p.wt = 3 * n;
  p.params = cols;
  p.act_float = rows * cols;
  p.act_fixed = rows * kStatBytes;
  return p;
}

// Llama block: q, k, v share their input (stashed once), rope packs q|k|v into [T, 3D] (kv heads repeated),
// the attention core stashes that and the probabilities; gate and up share their input; SwiGLU stashes gate
// and up outputs, down its input h.
Parts llama(const BlockSpec& b) {
  const std::int64_t t = b.seq_len, d = b.in_features, f = b.d_ff, h = b.n_heads;
  CLEAVE_ASSERT(t > 0 && d > 0 && f > 0 && h > 0 && b.n_kv_heads > 0, "llama block {} has unset sizes", b.name);
  const std::int64_t kv = b.n_kv_heads * (d / h);
  Parts p = rmsnorm(t, d);
  p += linear(t, d, d, false);
  Parts kv_proj = linear(t, d, kv, false);
  kv_proj.act_float = 0;  // the input q stashed
  p += kv_proj;
  p += kv_proj;
  Parts rope;
  rope.fwd = 6.0 * static_cast<double>(t * d);  // rotate q and the packed k: 3 per element
  rope.in = 6.0 * static_cast<double>(t * d) + 2.0 * static_cast<double>(t * d);  // + sums over shared heads
  p += rope;
  p += attention(t, d, h);
  p += linear(t, d, d, false);
  p += residual_add(t * d);
  p += rmsnorm(t, d);
  p += linear(t, d, f, false);
  Parts up = linear(t, d, f, false);
  up.act_float = 0;  // the input gate stashed
  p += up;
  Parts swiglu;
  swiglu.fwd = 5.0 * static_cast<double>(t * f);
  swiglu.in = 10.0 * static_cast<double>(t * f);
  swiglu.act_float = 2 * t * f;
  p += swiglu;
  p += linear(t, f, d, false);
  p += residual_add(t * d);
  return p;
}

Parts parts_of(const BlockSpec& b) {
  switch (b.kind) {
    case BlockKind::kEmbedding: {
      // Tokens from the input shape; learned positions only when seq_len > 0 (gpt; llama has none).
      const std::int64_t t = b.input.numel(), d = b.out_features, positions = b.seq_len;
      Parts p;
      p.fwd = positions > 0 ? static_cast<double>(t * d) : 0.0;
      p.wt = (positions > 0 ? 2.0 : 1.0) * static_cast<double>(t * d);
      p.params = b.vocab_size * d + positions * d;
      p.act_fixed = t * kStatBytes;
      return p;
    }
    case BlockKind::kTransformerBlock: return transformer(b);
    case BlockKind::kLlamaBlock: return llama(b);
    case BlockKind::kRmsNorm: return rmsnorm(b.input.rows(), b.input.last());
    case BlockKind::kLayerNorm: return layernorm(b.input.rows(), b.input.last());
    case BlockKind::kLmHead: return linear(b.input.rows(), b.in_features, b.out_features, false);
    case BlockKind::kLinear: return linear(b.input.numel() / b.in_features, b.in_features, b.out_features, true);
    case BlockKind::kRelu: return relu(b.input.numel());
    case BlockKind::kGelu: return gelu(b.input.numel());
    case BlockKind::kConv2d: {
      const std::int64_t c = b.input[0], hw = b.input[1] * b.input[2], co = b.out_features, k = b.kernel;
      const double gemm = 2.0 * static_cast<double>(co) * static_cast<double>(hw) * static_cast<double>(c * k * k);
      Parts p;
      p.fwd = gemm + static_cast<double>(co * hw);
      p.in = gemm;
      p.wt = gemm + static_cast<double>(co * hw);
      p.params = co * c * k * k + co;
      p.act_float = c * hw;
      return p;
    }
    case BlockKind::kMaxPool: {
      const std::int64_t outputs = b.output.numel(), window = b.kernel * b.kernel;
      Parts p;
      p.fwd = static_cast<double>(outputs * window);
      p.in = static_cast<double>(outputs);
      p.act_fixed = outputs * kStatBytes;
      return p;
    }
    case BlockKind::kFlatten: return Parts{};
    case BlockKind::kSoftmaxCrossEntropy: {
      const std::int64_t rows = b.input.rows(), classes = b.input.last();
      Parts p;
      p.fwd = 4.0 * static_cast<double>(rows * classes);
      p.in = 3.0 * static_cast<double>(rows * classes);
      p.act_float = rows * classes;
      p.act_fixed = 2 * rows * kStatBytes;
      return p;
    }
  }
  CLEAVE_ASSERT(false, "unknown BlockKind {}", static_cast<int>(b.kind));
}

// A transformer-like block's forward stash under train.recompute: `plain` is what it keeps without
// recomputation; selective drops the attention probabilities (`probs`) and rebuilds them inside I; full keeps
// only `input` and rebuilds all of `plain` inside I.
void apply_recompute(BlockCost& cost, Recompute recompute, std::int64_t plain, std::int64_t probs,
                     std::int64_t input) {
  if (recompute == Recompute::kSelective) {
    cost.recompute_transient_bytes = probs;
    cost.activation_bytes = plain - probs;
  } else if (recompute == Recompute::kFull) {
    cost.recompute_transient_bytes = plain;
    cost.activation_bytes = input;
  } else {
    cost.activation_bytes = plain;
  }
}

// Sequence parallelism (cost_model.hpp): one tp rank's activation, weight-stash and output bytes when the
// residual stream is split along the sequence. Every tensor the plain tp layout keeps whole becomes a
// [T / tp, ...] shard, except the output gradients a row-parallel linear all-gathers for its weight gradient
// (attention proj and fc2 keep dy [T, D] from I to W) and the embedding's gathered dy.
void sequence_parallel_share(const BlockSpec& block, BlockCost& cost, Recompute recompute, int tp, std::int64_t b) {
  const std::int64_t t = block.seq_len > 0 ? block.seq_len : block.input.rows(), ts = t / tp;
  switch (block.kind) {
    case BlockKind::kEmbedding: {
      const std::int64_t d = block.out_features;
      cost.output_bytes /= tp;
      cost.weight_stash_bytes = cost.activation_bytes + t * d * b + cost.output_bytes;  // ids, dy whole and shard
      break;
    }
    case BlockKind::kTransformerBlock: {
      const std::int64_t d = block.in_features, f = block.d_ff, h = block.n_heads;
      // ln1 / ln2 inputs, qkv / fc1 inputs (shards), qkv [T, 3D/tp], attention output [T, D/tp], fc1 and GELU
      // outputs [T, F/tp], the probabilities [H/tp, T, T], the norms' statistics of T/tp rows.
      const std::int64_t plain = (8 * t * d + 2 * t * f) / tp * b + (h / tp) * t * t * b + 4 * ts * kStatBytes;
      cost.weight_stash_bytes = (2 * t * d + (12 * t * d + 2 * t * f) / tp) * b + 4 * ts * kStatBytes;
      apply_recompute(cost, recompute, plain, (h / tp) * t * t * b, ts * d * b);
      cost.output_bytes = ts * d * b;
      break;
    }
    case BlockKind::kLlamaBlock: {
      const std::int64_t d = block.in_features, f = block.d_ff, h = block.n_heads;
      const std::int64_t kv = block.n_kv_heads * (d / h);
      // attn_norm / mlp_norm inputs and outputs (shards; q, k, v share attn_norm's, gate and up mlp_norm's),
      // qkv [T, 3D/tp], attention output [T, D/tp], gate, up and h [T, F/tp], the probabilities [H/tp, T, T],
      // two rstd of T/tp rows.
      const std::int64_t plain = (8 * t * d + 3 * t * f) / tp * b + (h / tp) * t * t * b + 2 * ts * kStatBytes;
      // o's and down's gathered dy [T, D] from I to W; the rest as plain tp with the replicated tensors as shards.
      cost.weight_stash_bytes = (2 * t * d + (8 * t * d + 2 * t * kv + 3 * t * f) / tp) * b + 2 * ts * kStatBytes;
      apply_recompute(cost, recompute, plain, (h / tp) * t * t * b, ts * d * b);
      cost.output_bytes = ts * d * b;
      break;
    }
    case BlockKind::kRmsNorm:
      cost.activation_bytes = ts * block.input.last() * b + ts * kStatBytes;
      cost.output_bytes /= tp;
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
      break;
    case BlockKind::kLayerNorm:
      cost.activation_bytes = ts * block.input.last() * b + 2 * ts * kStatBytes;
      cost.output_bytes /= tp;
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
      break;
    case BlockKind::kLmHead:
      cost.activation_bytes /= tp;  // the input shard (the gathered input is transient)
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
      break;
    default: break;  // the loss: vocab-parallel logits of every token, as without sequence parallelism
  }
}

// BlockCost::backward_extra_bytes of a block whose other fields `cost` (one tp rank's) are set.
std::int64_t backward_extra(const BlockSpec& block, const BlockCost& cost, Recompute recompute, int tp,
                            std::int64_t b, bool sequence_parallel) {
  if (block.kind == BlockKind::kTransformerBlock && sequence_parallel) {
    // mlp: fc2's gathered dy [T, D], GELU's input and output gradients [T, F/tp], fc1's partial dx [T, D] and
    // its reduce-scattered shard; attention: proj's gathered dy, dout and dqkv [T, 4D/tp], qkv's partial dx
    // [T, D] and the shards dy, dm, dx1, da [T/tp, D].
    const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff;
    const std::int64_t mlp = (2 * t * d + 2 * t * f / tp + t * d / tp) * b;
    std::int64_t attention = (2 * t * d + 4 * t * d / tp + 4 * t * d / tp) * b;
    if (recompute == Recompute::kSelective) attention += cost.recompute_transient_bytes;
    std::int64_t extra = std::max(mlp, attention);
    if (recompute == Recompute::kFull) extra += cost.recompute_transient_bytes - (t / tp) * d * b;
    return extra;
  }
  if (block.kind == BlockKind::kTransformerBlock) {
    const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff;
    const std::int64_t mlp = (2 * t * f / tp + t * d) * b;
    std::int64_t attention = (4 * t * d + 4 * t * d / tp) * b;
    if (recompute == Recompute::kSelective) attention += cost.recompute_transient_bytes;  // the probabilities
    std::int64_t extra = std::max(mlp, attention);
    if (recompute == Recompute::kFull) extra += cost.recompute_transient_bytes - t * d * b;  // input kept, shared
    return extra;
  }
  if (block.kind == BlockKind::kLlamaBlock && sequence_parallel) {
    // mlp: the dy shard, down's gathered dy [T, D], dh, dgate, dup [T, F/tp]; then gate's and up's partial dx
    // [T, D] (one at a time) and their reduce-scattered shards. attention: down's and o's gathered dy, the
    // shards dy and dx1, dout and dqkv [T, 4D/tp]; then dq, dk, dv, one projection's partial dx [T, D] and the
    // shards it and the one before reduce-scattered.
    const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff, ts = t / tp;
    const std::int64_t kv = block.n_kv_heads * (d / block.n_heads);
    const std::int64_t mlp = std::max(ts * d + t * d + 3 * t * f / tp, 2 * t * d + 3 * ts * d + 2 * t * f / tp) * b;
    std::int64_t attention =
        std::max(2 * t * d + 2 * ts * d + 4 * t * d / tp, 3 * t * d + 4 * ts * d + (t * d + 2 * t * kv) / tp) * b;
    if (recompute == Recompute::kSelective) attention += cost.recompute_transient_bytes;
    std::int64_t extra = std::max(mlp, attention);
    if (recompute == Recompute::kFull) extra += cost.recompute_transient_bytes - ts * d * b;
    return extra;
  }
  if (block.kind == BlockKind::kLlamaBlock) {
    // mlp: dy, dh, dgate, dup during swiglu_backward, then dy, dgate, dup and the two input gradients of gate
    // and up; attention: dy, dx1, dout, dqkv during the core's backward, then dy, dx1, dq, dk, dv and the
    // three input gradients of q, k, v (summed into the first).
    const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff;
    const std::int64_t kv = block.n_kv_heads * (d / block.n_heads);
    const std::int64_t mlp = std::max(t * d + 3 * t * f / tp, 3 * t * d + 2 * t * f / tp) * b;
    std::int64_t attention = std::max(2 * t * d + 4 * t * d / tp, 4 * t * d + (t * d + 2 * t * kv) / tp) * b;
    if (recompute == Recompute::kSelective) attention += cost.recompute_transient_bytes;  // the probabilities
    std::int64_t extra = std::max(mlp, attention);
    if (recompute == Recompute::kFull) extra += cost.recompute_transient_bytes - t * d * b;  // input kept, shared
    return extra;
  }
  // Any other block: dy and the input gradient it returns (none for token ids).
  const bool float_input = block.kind != BlockKind::kEmbedding;
  std::int64_t input = float_input ? block.input.numel() * b : 0;
  if (tp > 1 && block.kind == BlockKind::kSoftmaxCrossEntropy) input /= tp;  // vocab-parallel logits
  if (sequence_parallel && (block.kind == BlockKind::kLayerNorm || block.kind == BlockKind::kRmsNorm)) input /= tp;
  if (sequence_parallel && block.kind == BlockKind::kLmHead) input += input / tp;  // partial dx and its shard
  if (sequence_parallel && block.kind == BlockKind::kEmbedding) input = block.output.numel() * b;  // gathered dy
  return cost.output_bytes + input;
}

}  // namespace

BlockCost block_cost(const BlockSpec& block, DType dtype, Recompute recompute, int tp, bool sequence_parallel) {
  CLEAVE_CHECK(tp >= 1, "cost model: tensor-parallel width must be >= 1, got {}", tp);
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  const Parts p = parts_of(block);
  BlockCost cost;
  cost.forward_flops = p.fwd;
  cost.input_grad_flops = p.in;
  cost.weight_grad_flops = p.wt;
  cost.param_count = p.params;
  cost.param_bytes = p.params * b;
  cost.activation_bytes = p.act_float * b + p.act_fixed;
  cost.output_bytes = block.kind == BlockKind::kSoftmaxCrossEntropy ? 0 : block.output.numel() * b;
  switch (block.kind) {
    case BlockKind::kTransformerBlock: {
      // qkv (x, dy[3D]), proj (x, dy), fc1 (x, dy[F]), fc2 (x[F], dy); two LayerNorms (x, dy, mean, rstd).
      const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff;
      cost.weight_stash_bytes = t * (12 * d + 2 * f) * b + 4 * t * kStatBytes;
      break;
    }
    case BlockKind::kLlamaBlock: {
      // attn_norm (x, dy), q (x, dq), k (dk), v (dv) sharing q's x, o (x, dy), mlp_norm (x, dy), gate (x, dgate),
      // up (dup) sharing gate's x, down (h, dy); two rstd.
      const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff;
      const std::int64_t kv = block.n_kv_heads * (d / block.n_heads);
      cost.weight_stash_bytes = t * (10 * d + 3 * f + 2 * kv) * b + 2 * t * kStatBytes;
      break;
    }
    case BlockKind::kRmsNorm:
    case BlockKind::kEmbedding:
    case BlockKind::kLayerNorm:
    case BlockKind::kLmHead:
    case BlockKind::kLinear:
    case BlockKind::kConv2d:
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;  // the forward stash and dy
      break;
    default: break;  // no weights: backward_input frees everything
  }
  const bool transformer_like = block.kind == BlockKind::kTransformerBlock || block.kind == BlockKind::kLlamaBlock;
  if (transformer_like && recompute != Recompute::kNone) {
    const std::int64_t t = block.seq_len, d = block.in_features, h = block.n_heads;
    if (recompute == Recompute::kSelective) {
      const Parts core = attention(t, d, h);
      cost.input_grad_flops += core.fwd;
      cost.recompute_transient_bytes = h * t * t * b;
      cost.activation_bytes -= cost.recompute_transient_bytes;
    } else {
      cost.input_grad_flops += cost.forward_flops;
      cost.recompute_transient_bytes = cost.activation_bytes;
      cost.activation_bytes = t * d * b;
    }
  }
  if (tp > 1) {
    // One tp rank's share (see the header): only the sharded tensors divide.
    const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff, h = block.n_heads;
    switch (block.kind) {
      case BlockKind::kTransformerBlock: {
        const std::int64_t plain = (4 * t * d + (3 * t * d + t * d + 2 * t * f) / tp + (h / tp) * t * t) * b +
                                   4 * t * kStatBytes;
        cost.weight_stash_bytes = (8 * t * d + (4 * t * d + 2 * t * f) / tp) * b + 4 * t * kStatBytes;
        apply_recompute(cost, recompute, plain, (h / tp) * t * t * b, t * d * b);
        break;
      }
      case BlockKind::kLlamaBlock: {
        // Replicated: x, attn_norm's output, x1, mlp_norm's output; sharded: qkv, probabilities, attention output,
        // gate, up, h.
        const std::int64_t kv = block.n_kv_heads * (d / h);
        const std::int64_t plain = (4 * t * d + (3 * t * d + t * d + 3 * t * f) / tp + (h / tp) * t * t) * b +
                                   2 * t * kStatBytes;
        cost.weight_stash_bytes = (8 * t * d + (2 * t * d + 2 * t * kv + 3 * t * f) / tp) * b + 2 * t * kStatBytes;
        apply_recompute(cost, recompute, plain, (h / tp) * t * t * b, t * d * b);
        break;
      }
      case BlockKind::kLmHead:
        cost.output_bytes /= tp;
        cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
        break;
      case BlockKind::kSoftmaxCrossEntropy: {
        const std::int64_t rows = block.input.rows(), classes = block.input.last();
        cost.activation_bytes = rows * (classes / tp) * b + 2 * rows * kStatBytes;
        break;
      }
      default: break;  // embedding (ids; output whole after its all-reduce), final LayerNorm: replicated
    }
  }
  sequence_parallel = sequence_parallel && tp > 1;
  if (sequence_parallel) sequence_parallel_share(block, cost, recompute, tp, b);
  cost.backward_extra_bytes = backward_extra(block, cost, recompute, tp, b, sequence_parallel);
  return cost;
}

std::vector<BlockCost> model_costs(const ModelSpec& spec, DType dtype, Recompute recompute, int tp,
                                   bool sequence_parallel) {
  std::vector<BlockCost> costs;
  costs.reserve(spec.blocks.size());
  for (const BlockSpec& block : spec.blocks) {
    costs.push_back(block_cost(block, dtype, recompute, tp, sequence_parallel));
  }
  return costs;
}

TpBlockComm tp_block_comm(const BlockSpec& block, DType dtype, int tp, bool sequence_parallel, Recompute recompute) {
  CLEAVE_CHECK(tp >= 1, "cost model: tensor-parallel width must be >= 1, got {}", tp);
  TpBlockComm c;
  if (tp == 1) return c;
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  const bool sp = sequence_parallel;
  using Op = TpCollectiveOp;
  switch (block.kind) {
    case BlockKind::kEmbedding: {
      const std::int64_t stream = block.seq_len * block.out_features * b;
      c.forward.push_back({sp ? Op::kReduceScatter : Op::kAllReduce, stream});
      if (sp) c.input_grad.push_back({Op::kAllGather, stream});
      break;
    }
    case BlockKind::kTransformerBlock: {
      const std::int64_t stream = block.seq_len * block.in_features * b;
      for (int part = 0; part < 2; ++part) {  // attention (qkv, proj), mlp (fc1, fc2)
        if (sp) {
          c.forward.push_back({Op::kAllGather, stream});      // column-parallel input
          c.forward.push_back({Op::kReduceScatter, stream});  // row-parallel output
          c.input_grad.push_back({Op::kAllGather, stream});   // row-parallel dy
          c.input_grad.push_back({Op::kReduceScatter, stream});  // column-parallel dx
          c.weight_grad.push_back({Op::kAllGather, stream});  // column-parallel input again
        } else {
          c.forward.push_back({Op::kAllReduce, stream});
          c.input_grad.push_back({Op::kAllReduce, stream});
        }
      }
      if (recompute == Recompute::kFull) c.input_grad.insert(c.input_grad.begin(), c.forward.begin(), c.forward.end());
      break;
    }
    case BlockKind::kLmHead: {
      const std::int64_t stream = block.input.rows() * block.in_features * b;
      if (sp) {
        c.forward.push_back({Op::kAllGather, stream});
        c.input_grad.push_back({Op::kReduceScatter, stream});
        c.weight_grad.push_back({Op::kAllGather, stream});
      } else {
        c.input_grad.push_back({Op::kAllReduce, stream});
      }
      break;
    }
    case BlockKind::kSoftmaxCrossEntropy:
      if (block.vocab_size > 0) {
        c.forward.push_back({Op::kAllReduce, block.input.rows() * kStatBytes});      // row maxima
        c.forward.push_back({Op::kAllReduce, 2 * block.input.rows() * kStatBytes});  // sums, target logits
      }
      break;
    default: break;  // the final norm: no collective (replicated, or a sequence shard)
  }
  return c;
}

std::int64_t unique_param_count(const ModelSpec& spec, std::size_t first_block, std::size_t last_block) {
  CLEAVE_CHECK(first_block < last_block && last_block <= spec.blocks.size(),
               "block range [{}, {}) is empty or outside the model's {} blocks", first_block, last_block,
               spec.blocks.size());
  std::int64_t count = 0;
  bool has_embedding = false;
  bool has_tied_head = false;
  std::int64_t table = 0;
  for (std::size_t i = first_block; i < last_block; ++i) {
    const BlockSpec& b = spec.blocks[i];
    count += parts_of(b).params;
    if (b.kind == BlockKind::kEmbedding) has_embedding = true;
    if (b.kind == BlockKind::kLmHead && b.tied) {
      has_tied_head = true;
      table = b.in_features * b.out_features;
    }
  }
  if (has_embedding && has_tied_head) count -= table;
  return count;
}

}  // namespace cleave::partition
