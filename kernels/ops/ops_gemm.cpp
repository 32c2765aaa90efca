// gemm: operand shapes -> a GemmProblem (m, n, k, leading dimensions, batch strides), checked once for
// every backend (resolve_gemm, also the grouped GEMMs' per-group problems: ops_moe.cpp's group_gemm).
#include <algorithm>

#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {
namespace {

struct Matrix {
  std::int64_t rows = 0, cols = 0, stride = 0;  // stride: elements between batch entries (0 = broadcast)
};

Matrix as_matrix(const Tensor& t, std::int64_t batch, std::string_view name) {
  const std::int64_t cols = t.shape().last();
  CLEAVE_CHECK(cols > 0 || t.numel() == 0, "gemm: {} {} has no columns", name, t.shape().str());
  if (batch == 1) return {cols > 0 ? t.numel() / cols : 0, cols, 0};
  if (t.rank() == 2) return {t.dim(0), cols, 0};
  CLEAVE_CHECK(t.rank() >= 3 && t.dim(0) == batch, "gemm: {} {} is not a stack of {} matrices [batch, rows, cols]",
               name, t.shape().str(), batch);
  const std::int64_t per_entry = t.numel() / batch;
  return {cols > 0 ? per_entry / cols : 0, cols, per_entry};
}

}  // namespace

namespace detail {

GemmProblem resolve_gemm(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                         const GemmOptions& options) {
  constexpr std::string_view op = "gemm";
  check_float(ctx, op, "A", a);
  check_float(ctx, op, "B", b);
  check_float(ctx, op, "C", c);
  CLEAVE_CHECK(a.dtype() == b.dtype(), "gemm: A is {} but B is {}; they must share a dtype", dtype_name(a.dtype()),
               dtype_name(b.dtype()));
  CLEAVE_CHECK(options.batch >= 1, "gemm: batch must be >= 1, got {}", options.batch);
  const Matrix ma = as_matrix(a, options.batch, "A"), mb = as_matrix(b, options.batch, "B");
  const Matrix mc = as_matrix(c, options.batch, "C");
  CLEAVE_CHECK(mc.stride != 0 || options.batch == 1, "gemm: C {} must hold all {} batch entries", c.shape().str(),
               options.batch);
  GemmProblem p;
  p.a = a;
  p.b = b;
  p.c = c;
  p.trans_a = options.trans_a;
  p.trans_b = options.trans_b;
  p.m = options.trans_a ? ma.cols : ma.rows;
  p.k = options.trans_a ? ma.rows : ma.cols;
  p.n = options.trans_b ? mb.rows : mb.cols;
  const std::int64_t k_b = options.trans_b ? mb.cols : mb.rows;
  CLEAVE_CHECK(p.k == k_b, "gemm: op(A) is {}x{} but op(B) is {}x{} (A {}, B {}, trans_a {}, trans_b {})", p.m, p.k,
               k_b, p.n, a.shape().str(), b.shape().str(), options.trans_a, options.trans_b);
  CLEAVE_CHECK(mc.rows == p.m && mc.cols == p.n, "gemm: C {} should be {}x{} (the product of A {} and B {})",
               c.shape().str(), p.m, p.n, a.shape().str(), b.shape().str());
  p.lda = std::max<std::int64_t>(ma.cols, 1);
  p.ldb = std::max<std::int64_t>(mb.cols, 1);
  p.ldc = std::max<std::int64_t>(mc.cols, 1);
  p.stride_a = ma.stride;
  p.stride_b = mb.stride;
  p.stride_c = mc.stride;
  p.batch = options.batch;
  p.alpha = options.alpha;
  p.beta = options.beta;
  p.epilogue = options.epilogue;
  if (options.epilogue == GemmEpilogue::kBias) {
    check_float(ctx, op, "bias", options.bias);
    check_numel(op, "bias", options.bias, p.n);
    p.bias = options.bias;
  }
  return p;
}

}  // namespace detail

void gemm(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options) {
  detail::slot_of(ctx, &Backend::gemm, "gemm")(ctx, detail::resolve_gemm(ctx, a, b, c, options));
}

}  // namespace cleave::ops
