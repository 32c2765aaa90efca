// Mixture-of-experts ops (ops.hpp "Mixture of experts"): the grouped GEMMs, checked once and handed whole to the
// backend's grouped_gemm slot (a GroupedGemmProblem: row-block views and the groups' rows; group_gemm resolves one
// group's GEMM on them, so no per-call list is built; CUDA: one gemm each; the CPU: the small ones shared out whole
// over one OpenMP region), and the checks of the routing ops before their slots.

#include "kernels/ops/dispatch.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::ops {
namespace {

using namespace detail;

// The groups' sizes: each >= 0, summing to `rows`.
void check_groups(std::string_view op, std::span<const std::int64_t> groups, std::int64_t rows) {
  std::int64_t total = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    CLEAVE_CHECK(groups[g] >= 0, "{}: group {} has {} rows", op, g, groups[g]);
    total += groups[g];
  }
  CLEAVE_CHECK(total == rows, "{}: the groups hold {} rows but the grouped operands have {}", op, total, rows);
}

// t viewed as a matrix [numel / cols, cols].
Tensor as_rows(const Tensor& t, std::int64_t cols) { return t.view(Shape{t.numel() / cols, cols}); }

// Entry g of a [G, r, c] stack as an [r, c] matrix.
Tensor entry(const Tensor& t, std::int64_t g) { return t.slice(g, g + 1).view(Shape{t.dim(1), t.dim(2)}); }

}  // namespace

namespace detail {

GemmProblem group_gemm(const Context& ctx, const GroupedGemmProblem& problem, std::int64_t g, std::int64_t first) {
  const std::int64_t rows = problem.rows[static_cast<std::size_t>(g)];
  const Tensor a = problem.a.slice(first, first + rows);
  const bool row_blocks = problem.kind == GroupedGemmKind::kRowBlocks;
  const Tensor b = row_blocks ? entry(problem.b, g) : problem.b.slice(first, first + rows);
  const Tensor c = row_blocks ? problem.c.slice(first, first + rows) : entry(problem.c, g);
  GemmProblem p = resolve_gemm(ctx, a, b, c, problem.options);
  p.varying_shape = true;
  return p;
}

void grouped_gemm_each(const Context& ctx, const GroupedGemmProblem& problem) {
  const auto gemm = slot_of(ctx, &Backend::gemm, "gemm");
  std::int64_t first = 0;
  for (std::size_t g = 0; g < problem.rows.size(); ++g) {
    if (problem.rows[g] > 0) gemm(ctx, group_gemm(ctx, problem, static_cast<std::int64_t>(g), first));
    first += problem.rows[g];
  }
}

}  // namespace detail

void grouped_gemm(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                  std::span<const std::int64_t> groups, const GroupedGemmOptions& options) {
  constexpr std::string_view op = "grouped_gemm";
  check_float(ctx, op, "A", a);
  check_float(ctx, op, "B", b);
  check_float(ctx, op, "C", c);
  const auto g_count = static_cast<std::int64_t>(groups.size());
  CLEAVE_CHECK(b.rank() == 3 && b.dim(0) == g_count, "{}: B {} must be [{}, k, n], one matrix per group", op,
               b.shape().str(), g_count);
  const std::int64_t k = options.trans_b ? b.dim(2) : b.dim(1), n = options.trans_b ? b.dim(1) : b.dim(2);
  CLEAVE_CHECK(a.shape().last() == k, "{}: A {} has {} columns but op(B) has {} rows", op, a.shape().str(),
               a.shape().last(), k);
  CLEAVE_CHECK(c.shape().last() == n && c.numel() / n == a.numel() / k, "{}: C {} should be [{}, {}]", op,
               c.shape().str(), a.numel() / k, n);
  check_groups(op, groups, a.numel() / k);
  GroupedGemmProblem problem{GroupedGemmKind::kRowBlocks, as_rows(a, k), b, as_rows(c, n), groups, {}};
  problem.options.trans_b = options.trans_b;
  problem.options.alpha = options.alpha;
  problem.options.beta = options.beta;
  slot_of(ctx, &Backend::grouped_gemm, op)(ctx, problem);
}

void grouped_gemm_weight_grad(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                              std::span<const std::int64_t> groups, const GroupedGemmOptions& options) {
  constexpr std::string_view op = "grouped_gemm_weight_grad";
  check_float(ctx, op, "A", a);
  check_float(ctx, op, "B", b);
  check_float(ctx, op, "C", c);
  const auto g_count = static_cast<std::int64_t>(groups.size());
  CLEAVE_CHECK(c.rank() == 3 && c.dim(0) == g_count, "{}: C {} must be [{}, m, n], one matrix per group", op,
               c.shape().str(), g_count);
  const std::int64_t m = c.dim(1), n = c.dim(2);
  CLEAVE_CHECK(a.shape().last() == m && b.shape().last() == n && a.numel() / m == b.numel() / n,
               "{}: A {} and B {} should be [rows, {}] and [rows, {}]", op, a.shape().str(), b.shape().str(), m, n);
  check_groups(op, groups, a.numel() / m);
  GroupedGemmProblem problem{GroupedGemmKind::kWeightGrad, as_rows(a, m), as_rows(b, n), c, groups, {}};
  problem.options.trans_a = true;
  problem.options.alpha = options.alpha;
  problem.options.beta = options.beta;
  slot_of(ctx, &Backend::grouped_gemm, op)(ctx, problem);
}

void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out) {
  constexpr std::string_view op = "moe_gather";
  check_float(ctx, op, "x", x);
  check_dtype(ctx, op, "index", index, DType::kI32);
  check_float(ctx, op, "out", out);
  const std::int64_t d = x.shape().last();
  check_numel(op, "out", out, index.numel() * d);
  CLEAVE_CHECK(out.shape().last() == d, "{}: out {} and x {} differ in width", op, out.shape().str(), x.shape().str());
  if (scale.defined()) {
    check_dtype(ctx, op, "scale", scale, DType::kF32);
    check_numel(op, "scale", scale, index.numel());
  }
  slot_of(ctx, &Backend::moe_gather, op)(ctx, x, index, scale, out);
}

void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out) {
  constexpr std::string_view op = "moe_combine";
  check_float(ctx, op, "src", src);
  check_dtype(ctx, op, "rows", rows, DType::kI32);
  check_float(ctx, op, "out", out);
  CLEAVE_CHECK(rows.rank() == 2, "{}: rows {} must be [tokens, k]", op, rows.shape().str());
  const std::int64_t d = src.shape().last();
  CLEAVE_CHECK(out.shape().last() == d && out.numel() == rows.dim(0) * d, "{}: out {} should be [{}, {}]", op,
               out.shape().str(), rows.dim(0), d);
  if (weight.defined()) {
    check_dtype(ctx, op, "weight", weight, DType::kF32);
    check_numel(op, "weight", weight, rows.numel());
  }
  slot_of(ctx, &Backend::moe_combine, op)(ctx, src, rows, weight, out);
}

void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight) {
  constexpr std::string_view op = "moe_combine_weight_grad";
  check_float(ctx, op, "dy", dy);
  check_float(ctx, op, "src", src);
  check_dtype(ctx, op, "rows", rows, DType::kI32);
  check_dtype(ctx, op, "dweight", dweight, DType::kF32);
  CLEAVE_CHECK(rows.rank() == 2, "{}: rows {} must be [tokens, k]", op, rows.shape().str());
  const std::int64_t d = src.shape().last();
  CLEAVE_CHECK(dy.shape().last() == d && dy.numel() == rows.dim(0) * d, "{}: dy {} should be [{}, {}]", op,
               dy.shape().str(), rows.dim(0), d);
  check_numel(op, "dweight", dweight, rows.numel());
  slot_of(ctx, &Backend::moe_combine_weight_grad, op)(ctx, dy, src, rows, dweight);
}

}  // namespace cleave::ops
