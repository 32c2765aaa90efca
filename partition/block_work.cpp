// Roofline work of a block's passes (see block_work.hpp). Mirrors cost_model.cpp's helpers layer by layer.
#include "partition/block_work.hpp"

#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

using D = double;

// y[rows, out] = x[rows, in] · Wᵀ (+ bias, fused): dx = dy · W, dW = dyᵀ · x, db = Σ dy.
void linear(BlockWork& w, D rows, D in, D out, bool bias, D b) {
  w.forward.gemms.push_back({rows, out, in});
  w.input_grad.gemms.push_back({rows, in, out});
  w.weight_grad.gemms.push_back({out, in, rows});
  if (bias) w.weight_grad.stream_bytes += rows * out * b;
}

// Reads x, writes y; backward reads x and dy, writes dx; weight grads read x and dy.
void layernorm(BlockWork& w, D n, D b) {
  w.forward.stream_bytes += 2 * n * b;
  w.input_grad.stream_bytes += 3 * n * b;
  w.weight_grad.stream_bytes += 2 * n * b;
}

void pointwise(BlockWork& w, D n, D b) {  // GELU, ReLU
  w.forward.stream_bytes += 2 * n * b;
  w.input_grad.stream_bytes += 3 * n * b;
}

void residual(BlockWork& w, D n, D b) {  // y = x + f(x): reads two, writes one; its gradient is summed likewise
  w.forward.stream_bytes += 3 * n * b;
  w.input_grad.stream_bytes += 3 * n * b;
}

// Core attention for `batch` (samples x local heads) heads of width dh over T positions.
PassWork attention_forward(D batch, D t, D dh, D b) {
  PassWork p;
  p.gemms.push_back({t, t, dh, batch});  // S = Q·Kᵀ
  p.stream_bytes += 2 * batch * t * t * b;  // softmax: reads S, writes P
  p.gemms.push_back({t, dh, t, batch});  // O = P·V
  return p;
}

PassWork attention_backward(D batch, D t, D dh, D b) {
  PassWork p;
  p.gemms.push_back({t, t, dh, batch});  // dP = dO·Vᵀ
  p.gemms.push_back({t, dh, t, batch});  // dV = Pᵀ·dO
  p.stream_bytes += 3 * batch * t * t * b;  // softmax backward: reads P and dP, writes dS
  p.gemms.push_back({t, dh, t, batch});  // dQ = dS·K
  p.gemms.push_back({t, dh, t, batch});  // dK = dSᵀ·Q
  return p;
}

BlockWork transformer(const BlockSpec& blk, D b, int tp, D micro, Recompute recompute) {
  const D t = static_cast<D>(blk.seq_len), d = static_cast<D>(blk.in_features), f = static_cast<D>(blk.d_ff);
  const D heads = static_cast<D>(blk.n_heads / tp), dh = d / static_cast<D>(blk.n_heads);
  const D rows = micro * t, p = tp;
  BlockWork w;
  layernorm(w, rows * d, b);
  linear(w, rows, d, 3 * d / p, true, b);
  const PassWork core_forward = attention_forward(micro * heads, t, dh, b);
  w.forward += core_forward;
  w.input_grad += attention_backward(micro * heads, t, dh, b);
  linear(w, rows, d / p, d, true, b);
  residual(w, rows * d, b);
  layernorm(w, rows * d, b);
  linear(w, rows, d, f / p, true, b);
  pointwise(w, rows * f / p, b);
  linear(w, rows, f / p, d, true, b);
  residual(w, rows * d, b);
  if (recompute == Recompute::kSelective) w.input_grad += core_forward;
  if (recompute == Recompute::kFull) w.input_grad += w.forward;
  return w;
}

// Llama block: RMSNorms, separate q/k/v projections (k, v of Hkv heads), rope + packing, attention over the
// packed q|k|v (kv heads repeated), o; gate and up, SwiGLU, down. No biases.
BlockWork llama(const BlockSpec& blk, D b, int tp, D micro, Recompute recompute) {
  const D t = static_cast<D>(blk.seq_len), d = static_cast<D>(blk.in_features), f = static_cast<D>(blk.d_ff);
  const D heads = static_cast<D>(blk.n_heads / tp), dh = d / static_cast<D>(blk.n_heads);
  const D kv = static_cast<D>(blk.n_kv_heads) * dh;  // k and v width
  const D rows = micro * t, p = tp;
  BlockWork w;
  layernorm(w, rows * d, b);  // RMSNorm streams like a LayerNorm
  linear(w, rows, d, d / p, false, b);
  linear(w, rows, d, kv / p, false, b);
  linear(w, rows, d, kv / p, false, b);
  const D packed = rows * 3 * d / p;  // rope: reads q, k, v, writes qkv; backward the reverse
  w.forward.stream_bytes += (rows * (d + 2 * kv) / p + packed) * b;
  w.input_grad.stream_bytes += (rows * (d + 2 * kv) / p + packed) * b;
  const PassWork core_forward = attention_forward(micro * heads, t, dh, b);
  w.forward += core_forward;
  w.input_grad += attention_backward(micro * heads, t, dh, b);
  linear(w, rows, d / p, d, false, b);
  residual(w, rows * d, b);
  layernorm(w, rows * d, b);
  linear(w, rows, d, f / p, false, b);
  linear(w, rows, d, f / p, false, b);
  w.forward.stream_bytes += 3 * rows * f / p * b;     // swiglu: reads gate, up, writes h
  w.input_grad.stream_bytes += 5 * rows * f / p * b;  // reads gate, up, dh, writes dgate, dup
  linear(w, rows, f / p, d, false, b);
  residual(w, rows * d, b);
  if (recompute == Recompute::kSelective) w.input_grad += core_forward;
  if (recompute == Recompute::kFull) w.input_grad += w.forward;
  return w;
}

}  // namespace

double PassWork::gemm_flops() const {
  double sum = 0;
  for (const Gemm& g : gemms) sum += g.flops();
  return sum;
}

PassWork& PassWork::operator+=(const PassWork& other) {
  gemms.insert(gemms.end(), other.gemms.begin(), other.gemms.end());
  stream_bytes += other.stream_bytes;
  return *this;
}

BlockWork block_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch) {
  CLEAVE_CHECK(tp >= 1 && micro_batch >= 1, "block work: tp {} and micro-batch {} must be >= 1", tp, micro_batch);
  const D b = static_cast<D>(dtype_size(dtype)), micro = static_cast<D>(micro_batch);
  BlockWork w;
  switch (block.kind) {
    case BlockKind::kTransformerBlock: return transformer(block, b, tp, micro, recompute);
    case BlockKind::kLlamaBlock: return llama(block, b, tp, micro, recompute);
    case BlockKind::kEmbedding: {
      const D n = micro * static_cast<D>(block.input.numel() * block.out_features);
      const D tables = block.seq_len > 0 ? 3 : 2;  // with learned positions: two tables read / scattered into
      w.forward.stream_bytes = tables * n * b;
      w.weight_grad.stream_bytes = tables * n * b;
      return w;
    }
    case BlockKind::kLayerNorm:
    case BlockKind::kRmsNorm: layernorm(w, micro * static_cast<D>(block.input.numel()), b); return w;
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
      return w;
    }
    case BlockKind::kMaxPool: {
      const D in = micro * static_cast<D>(block.input.numel()), out = micro * static_cast<D>(block.output.numel());
      w.forward.stream_bytes = (in + 2 * out) * b;
      w.input_grad.stream_bytes = (in + 2 * out) * b;
      return w;
    }
    case BlockKind::kFlatten: return w;
    case BlockKind::kSoftmaxCrossEntropy: {
      const D n = micro * static_cast<D>(block.input.rows() * (block.input.last() / tp));
      w.forward.stream_bytes = 2 * n * b;     // max pass, exp-sum pass
      w.input_grad.stream_bytes = 2 * n * b;  // reads logits, writes their gradient
      return w;
    }
  }
  CLEAVE_ASSERT(false, "unknown BlockKind {}", static_cast<int>(block.kind));
}

}  // namespace cleave::partition
