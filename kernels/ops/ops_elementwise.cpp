// Element-wise ops, bias and activations: checks and dispatch (see ops.hpp for each contract).
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

void fill(const Context& ctx, const Tensor& t, float value) {
  check_float(ctx, "fill", "tensor", t);
  slot_of(ctx, &Backend::fill, "fill")(ctx, t, value);
}

void copy(const Context& ctx, const Tensor& src, const Tensor& dst) {
  check_on(ctx, "copy", "src", src);
  check_on(ctx, "copy", "dst", dst);
  check_same_numel("copy", "src", src, "dst", dst);
  const bool floats = (src.dtype() == DType::kF32 || src.dtype() == DType::kBF16) &&
                      (dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16);
  CLEAVE_CHECK(src.dtype() == dst.dtype() || floats, "copy: cannot convert {} to {}", dtype_name(src.dtype()),
               dtype_name(dst.dtype()));
  slot_of(ctx, &Backend::copy, "copy")(ctx, src, dst);
}

void copy_2d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy2d& s) {
  check_on(ctx, "copy_2d", "src", src);
  check_on(ctx, "copy_2d", "dst", dst);
  CLEAVE_CHECK(src.dtype() == dst.dtype(), "copy_2d: src is {} and dst {}; both must have one dtype",
               dtype_name(src.dtype()), dtype_name(dst.dtype()));
  CLEAVE_CHECK(s.rows >= 0 && s.cols >= 0 && s.src_offset >= 0 && s.dst_offset >= 0 && s.src_stride >= s.cols &&
                   s.dst_stride >= s.cols,
               "copy_2d: bad shape rows {} cols {} src offset {} stride {} dst offset {} stride {}", s.rows, s.cols,
               s.src_offset, s.src_stride, s.dst_offset, s.dst_stride);
  if (s.rows == 0 || s.cols == 0) return;
  const auto end = [&](std::int64_t offset, std::int64_t stride) { return offset + (s.rows - 1) * stride + s.cols; };
  CLEAVE_CHECK(end(s.src_offset, s.src_stride) <= src.numel() && end(s.dst_offset, s.dst_stride) <= dst.numel(),
               "copy_2d: {} rows of {} reach element {} of src ({} elements) and {} of dst ({})", s.rows, s.cols,
               end(s.src_offset, s.src_stride), src.numel(), end(s.dst_offset, s.dst_stride), dst.numel());
  slot_of(ctx, &Backend::copy_2d, "copy_2d")(ctx, src, dst, s);
}

void copy_3d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy3d& s) {
  check_on(ctx, "copy_3d", "src", src);
  check_on(ctx, "copy_3d", "dst", dst);
  const auto is_float = [](DType d) { return d == DType::kF32 || d == DType::kBF16; };
  CLEAVE_CHECK(src.dtype() == dst.dtype() || (is_float(src.dtype()) && is_float(dst.dtype())),
               "copy_3d: cannot convert {} to {}; one dtype, or f32 <-> bf16", dtype_name(src.dtype()),
               dtype_name(dst.dtype()));
  CLEAVE_CHECK(s.batches >= 0 && s.rows >= 0 && s.cols >= 0 && s.src_offset >= 0 && s.dst_offset >= 0 &&
                   s.src_batch_stride >= 0 && s.dst_batch_stride >= 0 && s.src_row_stride >= s.cols &&
                   s.dst_row_stride >= s.cols,
               "copy_3d: bad shape batches {} rows {} cols {}, src offset {} strides {} {}, dst offset {} strides "
               "{} {}",
               s.batches, s.rows, s.cols, s.src_offset, s.src_batch_stride, s.src_row_stride, s.dst_offset,
               s.dst_batch_stride, s.dst_row_stride);
  if (s.batches == 0 || s.rows == 0 || s.cols == 0) return;
  const std::int64_t block = (s.rows - 1) * s.dst_row_stride + s.cols;  // a batch's span in dst
  CLEAVE_CHECK(s.batches == 1 || s.dst_batch_stride >= block,
               "copy_3d: dst batch stride {} is below a batch's span of {} elements ({} rows, stride {}, {} cols): "
               "batches would overwrite each other",
               s.dst_batch_stride, block, s.rows, s.dst_row_stride, s.cols);
  const auto end = [&](std::int64_t offset, std::int64_t batch_stride, std::int64_t row_stride) {
    return offset + (s.batches - 1) * batch_stride + (s.rows - 1) * row_stride + s.cols;
  };
  const std::int64_t src_end = end(s.src_offset, s.src_batch_stride, s.src_row_stride);
  const std::int64_t dst_end = end(s.dst_offset, s.dst_batch_stride, s.dst_row_stride);
  CLEAVE_CHECK(src_end <= src.numel() && dst_end <= dst.numel(),
               "copy_3d: {} batches of {} rows of {} reach element {} of src ({} elements) and {} of dst ({})",
               s.batches, s.rows, s.cols, src_end, src.numel(), dst_end, dst.numel());
  slot_of(ctx, &Backend::copy_3d, "copy_3d")(ctx, src, dst, s);
}

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_float(ctx, "add", "a", a);
  check_float(ctx, "add", "b", b);
  check_float(ctx, "add", "out", out);
  check_same_numel("add", "a", a, "b", b);
  check_same_numel("add", "a", a, "out", out);
  slot_of(ctx, &Backend::add, "add")(ctx, a, b, out);
}

void add_inplace(const Context& ctx, const Tensor& y, const Tensor& x) {
  check_float(ctx, "add_inplace", "y", y);
  check_float(ctx, "add_inplace", "x", x);
  check_same_numel("add_inplace", "y", y, "x", x);
  slot_of(ctx, &Backend::add_inplace, "add_inplace")(ctx, y, x);
}

void scale_inplace(const Context& ctx, const Tensor& y, float alpha) {
  check_float(ctx, "scale_inplace", "y", y);
  slot_of(ctx, &Backend::scale_inplace, "scale_inplace")(ctx, y, alpha);
}

void scale_inplace_many(const Context& ctx, std::span<const Tensor> ys, float alpha) {
  for (const Tensor& y : ys) check_float(ctx, "scale_inplace_many", "y", y);
  slot_of(ctx, &Backend::scale_inplace_many, "scale_inplace_many")(ctx, ys, alpha);
}

namespace detail {

void scale_inplace_each(const Context& ctx, std::span<const Tensor> ys, float alpha) {
  const auto slot = slot_of(ctx, &Backend::scale_inplace, "scale_inplace");
  for (const Tensor& y : ys) slot(ctx, y, alpha);
}

}  // namespace detail

void axpy(const Context& ctx, float alpha, const Tensor& x, const Tensor& y) {
  check_float(ctx, "axpy", "x", x);
  check_float(ctx, "axpy", "y", y);
  check_same_numel("axpy", "x", x, "y", y);
  slot_of(ctx, &Backend::axpy, "axpy")(ctx, alpha, x, y);
}

double sum_squares(const Context& ctx, const Tensor& x) {
  check_float(ctx, "sum_squares", "x", x);
  const auto slot = slot_of(ctx, &Backend::sum_squares, "sum_squares");
  note_host_wait(ctx, HostWait::kSumSquares);
  return slot(ctx, x);
}

double sum_squares_many(const Context& ctx, std::span<const Tensor> xs) {
  for (const Tensor& x : xs) check_float(ctx, "sum_squares_many", "x", x);
  const auto slot = slot_of(ctx, &Backend::sum_squares_many, "sum_squares_many");
  note_host_wait(ctx, HostWait::kSumSquaresMany);
  return slot(ctx, xs);
}

kernels::ExactSquareSum sum_squares_exact(const Context& ctx, std::span<const Tensor> xs) {
  for (const Tensor& x : xs) check_float(ctx, "sum_squares_exact", "x", x);
  const auto slot = slot_of(ctx, &Backend::sum_squares_exact, "sum_squares_exact");
  note_host_wait(ctx, HostWait::kSumSquaresMany);  // the same one read-back as sum_squares_many
  return slot(ctx, xs);
}

void bias_add_forward(const Context& ctx, const Tensor& y, const Tensor& bias) {
  check_float(ctx, "bias_add_forward", "y", y);
  check_float(ctx, "bias_add_forward", "bias", bias);
  check_numel("bias_add_forward", "bias", bias, y.shape().last());
  slot_of(ctx, &Backend::bias_add_forward, "bias_add_forward")(ctx, y, bias);
}

void bias_backward(const Context& ctx, const Tensor& dy, const Tensor& dbias) {
  check_float(ctx, "bias_backward", "dy", dy);
  check_dtype(ctx, "bias_backward", "dbias", dbias, DType::kF32);
  check_numel("bias_backward", "dbias", dbias, dy.shape().last());
  slot_of(ctx, &Backend::bias_backward, "bias_backward")(ctx, dy, dbias);
}

namespace {
void check_unary(const Context& ctx, std::string_view op, const Tensor& x, const Tensor& y) {
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "y", y);
  check_same_numel(op, "x", x, "y", y);
}
void check_unary_backward(const Context& ctx, std::string_view op, const Tensor& x, const Tensor& dy,
                          const Tensor& dx) {
  check_unary(ctx, op, x, dy);
  check_float(ctx, op, "dx", dx);
  check_same_numel(op, "x", x, "dx", dx);
}
}  // namespace

void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  check_unary(ctx, "gelu_forward", x, y);
  slot_of(ctx, &Backend::gelu_forward, "gelu_forward")(ctx, x, y);
}

void gelu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_unary_backward(ctx, "gelu_backward", x, dy, dx);
  slot_of(ctx, &Backend::gelu_backward, "gelu_backward")(ctx, x, dy, dx);
}

void relu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  check_unary(ctx, "relu_forward", x, y);
  slot_of(ctx, &Backend::relu_forward, "relu_forward")(ctx, x, y);
}

void relu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_unary_backward(ctx, "relu_backward", x, dy, dx);
  slot_of(ctx, &Backend::relu_backward, "relu_backward")(ctx, x, dy, dx);
}

void softmax_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  check_unary(ctx, "softmax_forward", x, y);
  slot_of(ctx, &Backend::softmax_forward, "softmax_forward")(ctx, x, y);
}

void softmax_backward(const Context& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_unary_backward(ctx, "softmax_backward", y, dy, dx);
  slot_of(ctx, &Backend::softmax_backward, "softmax_backward")(ctx, y, dy, dx);
}

}  // namespace cleave::ops
