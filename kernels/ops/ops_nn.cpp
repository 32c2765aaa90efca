// LayerNorm, embeddings, convolution and pooling: checks and dispatch (contracts in ops.hpp).
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  constexpr std::string_view op = "layernorm_forward";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "gamma", gamma);
  check_float(ctx, op, "beta", beta);
  check_float(ctx, op, "y", y);
  check_dtype(ctx, op, "mean", mean, DType::kF32);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "x", x, "y", y);
  check_numel(op, "gamma", gamma, x.shape().last());
  check_numel(op, "beta", beta, x.shape().last());
  check_numel(op, "mean", mean, x.shape().rows());
  check_numel(op, "rstd", rstd, x.shape().rows());
  slot_of(ctx, &Backend::layernorm_forward, op)(ctx, x, gamma, beta, y, mean, rstd, eps);
}

void layernorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  constexpr std::string_view op = "layernorm_backward_input";
  check_float(ctx, op, "dy", dy);
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "gamma", gamma);
  check_float(ctx, op, "dx", dx);
  check_dtype(ctx, op, "mean", mean, DType::kF32);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "dy", dy, "x", x);
  check_same_numel(op, "dx", dx, "x", x);
  check_numel(op, "gamma", gamma, x.shape().last());
  check_numel(op, "mean", mean, x.shape().rows());
  slot_of(ctx, &Backend::layernorm_backward_input, op)(ctx, dy, x, gamma, mean, rstd, dx);
}

void layernorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta) {
  constexpr std::string_view op = "layernorm_backward_weight";
  check_float(ctx, op, "dy", dy);
  check_float(ctx, op, "x", x);
  check_dtype(ctx, op, "mean", mean, DType::kF32);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_dtype(ctx, op, "dgamma", dgamma, DType::kF32);
  check_dtype(ctx, op, "dbeta", dbeta, DType::kF32);
  check_same_numel(op, "dy", dy, "x", x);
  check_numel(op, "dgamma", dgamma, x.shape().last());
  check_numel(op, "dbeta", dbeta, x.shape().last());
  slot_of(ctx, &Backend::layernorm_backward_weight, op)(ctx, dy, x, mean, rstd, dgamma, dbeta);
}

namespace {
void check_range(std::string_view op, const VocabRange& range, const Tensor& table) {
  CLEAVE_CHECK(range.vocab > 0 && range.first >= 0 && range.valid >= 0 && range.first + range.valid <= range.vocab,
               "{}: vocabulary range [{}, {}) does not fit a vocabulary of {}", op, range.first,
               range.first + range.valid, range.vocab);
  if (table.defined()) {
    CLEAVE_CHECK(table.rank() == 2 && table.dim(0) >= range.valid, "{}: table {} holds fewer than {} rows", op,
                 table.shape().str(), range.valid);
  }
}
}  // namespace

void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range) {
  constexpr std::string_view op = "embedding_forward";
  check_dtype(ctx, op, "ids", ids, DType::kI32);
  check_float(ctx, op, "table", table);
  check_float(ctx, op, "out", out);
  check_range(op, range, table);
  check_numel(op, "out", out, ids.numel() * table.dim(1));
  slot_of(ctx, &Backend::embedding_forward, op)(ctx, ids, table, out, range);
}

void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range) {
  constexpr std::string_view op = "embedding_backward";
  check_dtype(ctx, op, "ids", ids, DType::kI32);
  check_float(ctx, op, "dout", dout);
  check_dtype(ctx, op, "dtable", dtable, DType::kF32);
  check_range(op, range, dtable);
  check_numel(op, "dout", dout, ids.numel() * dtable.dim(1));
  slot_of(ctx, &Backend::embedding_backward, op)(ctx, ids, dout, dtable, range);
}

namespace {
void check_positions(std::string_view op, const Tensor& x, const Tensor& pos) {
  CLEAVE_CHECK(x.rank() == 3, "{}: expected [batch, seq, dim], got {}", op, x.shape().str());
  CLEAVE_CHECK(pos.rank() == 2 && pos.dim(1) == x.dim(2) && pos.dim(0) >= x.dim(1),
               "{}: position table {} does not cover {} positions of width {}", op, pos.shape().str(), x.dim(1),
               x.dim(2));
}
}  // namespace

void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos) {
  constexpr std::string_view op = "position_embedding_forward";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "pos", pos);
  check_positions(op, x, pos);
  slot_of(ctx, &Backend::position_embedding_forward, op)(ctx, x, pos);
}

void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos) {
  constexpr std::string_view op = "position_embedding_backward";
  check_float(ctx, op, "dx", dx);
  check_dtype(ctx, op, "dpos", dpos, DType::kF32);
  check_positions(op, dx, dpos);
  slot_of(ctx, &Backend::position_embedding_backward, op)(ctx, dx, dpos);
}

namespace {
void check_conv(std::string_view op, const Tensor& x_like, const Tensor& weight, const Conv2dParams& params) {
  CLEAVE_CHECK(x_like.rank() == 4, "{}: expected [batch, channels, height, width], got {}", op, x_like.shape().str());
  CLEAVE_CHECK(weight.rank() == 4 && weight.dim(2) == weight.dim(3),
               "{}: weight {} should be [out_channels, in_channels, k, k]", op, weight.shape().str());
  CLEAVE_CHECK(params.stride > 0 && params.padding >= 0, "{}: stride {} must be > 0 and padding {} >= 0", op,
               params.stride, params.padding);
}
}  // namespace

void conv2d_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Conv2dParams& params) {
  constexpr std::string_view op = "conv2d_forward";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "weight", weight);
  check_float(ctx, op, "bias", bias);
  check_float(ctx, op, "y", y);
  check_conv(op, x, weight, params);
  CLEAVE_CHECK(x.dim(1) == weight.dim(1), "{}: x {} has {} channels, weight {} expects {}", op, x.shape().str(),
               x.dim(1), weight.shape().str(), weight.dim(1));
  check_numel(op, "bias", bias, weight.dim(0));
  slot_of(ctx, &Backend::conv2d_forward, op)(ctx, x, weight, bias, y, params);
}

void conv2d_backward_input(const Context& ctx, const Tensor& dy, const Tensor& weight, const Tensor& dx,
                           const Conv2dParams& params) {
  constexpr std::string_view op = "conv2d_backward_input";
  check_float(ctx, op, "dy", dy);
  check_float(ctx, op, "weight", weight);
  check_float(ctx, op, "dx", dx);
  check_conv(op, dx, weight, params);
  slot_of(ctx, &Backend::conv2d_backward_input, op)(ctx, dy, weight, dx, params);
}

void conv2d_backward_weight(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dweight,
                            const Tensor& dbias, const Conv2dParams& params) {
  constexpr std::string_view op = "conv2d_backward_weight";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "dy", dy);
  check_dtype(ctx, op, "dweight", dweight, DType::kF32);
  check_conv(op, x, dweight, params);
  if (dbias.defined()) {
    check_dtype(ctx, op, "dbias", dbias, DType::kF32);
    check_numel(op, "dbias", dbias, dweight.dim(0));
  }
  slot_of(ctx, &Backend::conv2d_backward_weight, op)(ctx, x, dy, dweight, dbias, params);
}

void maxpool2d_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& argmax,
                       std::int64_t window, std::int64_t stride) {
  constexpr std::string_view op = "maxpool2d_forward";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "y", y);
  check_dtype(ctx, op, "argmax", argmax, DType::kI32);
  CLEAVE_CHECK(x.rank() == 4 && window > 0 && stride > 0 && window <= x.dim(2) && window <= x.dim(3),
               "{}: window {} (stride {}) does not fit x {}", op, window, stride, x.shape().str());
  check_same_numel(op, "y", y, "argmax", argmax);
  slot_of(ctx, &Backend::maxpool2d_forward, op)(ctx, x, y, argmax, window, stride);
}

void maxpool2d_backward(const Context& ctx, const Tensor& dy, const Tensor& argmax, const Tensor& dx,
                        std::int64_t window, std::int64_t stride) {
  constexpr std::string_view op = "maxpool2d_backward";
  check_float(ctx, op, "dy", dy);
  check_dtype(ctx, op, "argmax", argmax, DType::kI32);
  check_float(ctx, op, "dx", dx);
  CLEAVE_CHECK(dx.rank() == 4 && window > 0 && stride > 0, "{}: bad window {} / stride {} for dx {}", op, window,
               stride, dx.shape().str());
  check_same_numel(op, "dy", dy, "argmax", argmax);
  slot_of(ctx, &Backend::maxpool2d_backward, op)(ctx, dy, argmax, dx, window, stride);
}

}  // namespace cleave::ops
