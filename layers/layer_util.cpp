// Helpers shared by the CPU layers (see layer_util.hpp).
#include "layers/layer_util.hpp"

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::layers {

Tensor new_activation(const Context& ctx, const Shape& shape) {
  return new_activation(ctx, shape, ctx.compute_dtype());
}

Tensor new_activation(const Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, MemoryCategory::kActivations, *ctx.allocator);
}

Tensor new_workspace(const Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, MemoryCategory::kWorkspace, *ctx.allocator);
}

void refresh_working_copies(const std::vector<std::shared_ptr<Param>>& params, const Context& ctx) {
  if (ctx.precision != ops::Precision::kBf16) return;
  for (const auto& p : params) {
    if (!p->working.defined()) {
      p->working = Tensor::empty(p->value.shape(), DType::kBF16, MemoryCategory::kParameters, *ctx.allocator);
    }
    ops::copy(ctx, p->value, p->working);
  }
}

void check_input(const Context& ctx, const Tensor& x, DType dtype, std::int64_t last, int min_rank, std::string_view who_,
                 std::string_view input) {
  const auto who = [&] { return input.empty() ? std::string(who_) : fmt::format("{} ({})", who_, input); };
  CLEAVE_CHECK(x.defined(), "{}: input tensor is undefined", who());
  CLEAVE_CHECK(x.device() == ctx.device, "{}: input is on {}, but this layer runs on {}", who(), x.device().str(),
               ctx.device.str());
  const bool floating = dtype == DType::kF32 && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16);
  CLEAVE_CHECK(x.dtype() == dtype || floating, "{}: expected {} input, got {} {}", who(),
               dtype == DType::kF32 ? "a floating (f32 or bf16)" : with_article(dtype_name(dtype)), x.shape().str(),
               dtype_name(x.dtype()));
  CLEAVE_CHECK(x.rank() >= min_rank, "{}: expected an input of rank >= {}, got {}", who(), min_rank, x.shape().str());
  CLEAVE_CHECK(last < 0 || x.shape().last() == last, "{}: expected input [..., {}], got {}", who(), last,
               x.shape().str());
}

Shape with_last(const Shape& shape, std::int64_t last) {
  CLEAVE_ASSERT(shape.rank() >= 1, "with_last on a scalar shape");
  return shape.with_dim(shape.rank() - 1, last);
}

const Tensor& stash_at(const Stash& stash, std::size_t i, std::string_view who) {
  CLEAVE_ASSERT(i < stash.tensors.size(), "{}: stash holds {} tensors, slot {} requested (backward without "
                "forward, or a stash reused?)", who, stash.tensors.size(), i);
  return stash.tensors[i];
}

EvalCounts eval_counts(const Context& ctx, const Tensor& loss, const Tensor& neg_index, const Tensor& targets) {
  const ops::CorrectCount count = ops::count_correct(ctx, neg_index, targets);
  EvalCounts out;
  out.rows = count.rows;
  out.correct = count.correct;
  // count_correct waited for the stream already: one more read-back of one float (device-safe).
  out.loss_sum = static_cast<double>(ops::to_host(ctx, loss).to_floats()[0]) * static_cast<double>(count.rows);
  return out;
}

}  // namespace cleave::layers
