// SharedInputParts: one all-gather / one reduce-scatter (or all-reduce) for projections sharing an input
// (shared_input.hpp).
#include "layers/parallel/shared_input.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

SharedInputParts::SharedInputParts(std::vector<Layer*> parts) : parts_(std::move(parts)) {
  CLEAVE_ASSERT(!parts_.empty(), "SharedInputParts: no parts");
  for (Layer* part : parts_) {
    CLEAVE_ASSERT(part != nullptr, "SharedInputParts: a null part");
    auto* column = dynamic_cast<ColumnParallelLinear*>(part);
    if (column == nullptr) {
      columns_.clear();
      return;
    }
    CLEAVE_ASSERT(columns_.empty() || (column->tp_size() == columns_.front()->tp_size() &&
                                       column->in_features() == columns_.front()->in_features()),
                  "SharedInputParts: parts of different tp sizes or input widths");
    columns_.push_back(column);
  }
}

bool SharedInputParts::shared(const Context& ctx) const {
  return !columns_.empty() && sequence_parallel(ctx, columns_.front()->tp_size());
}

bool SharedInputParts::sums_once() const { return !columns_.empty() && columns_.front()->tp_size() > 1; }

void SharedInputParts::forward(const Tensor& x, std::span<Stash* const> stashes, std::span<Tensor> out,
                               Context& ctx) const {
  CLEAVE_ASSERT(stashes.size() == parts_.size() && out.size() == parts_.size(),
                "SharedInputParts: {} stashes and {} outputs for {} parts", stashes.size(), out.size(), parts_.size());
  if (!shared(ctx)) {
    for (std::size_t i = 0; i < parts_.size(); ++i) out[i] = parts_[i]->forward(x, *stashes[i], ctx);
    return;
  }
  const ColumnParallelLinear& first = *columns_.front();
  tp_group(ctx, first.tp_size(), first.tp_rank(), "shared column-parallel input");
  check_input(ctx, x, DType::kF32, first.in_features(), 3, "shared column-parallel input");
  const Tensor full = sequence_all_gather(x, ctx, first.tp_size(), first.tp_rank(), "shared column-parallel input");
  for (std::size_t i = 0; i < parts_.size(); ++i) out[i] = columns_[i]->forward_gathered(x, full, *stashes[i], ctx);
}

Tensor SharedInputParts::backward_input(std::span<const Tensor> dys, std::span<Stash* const> stashes,
                                        Context& ctx) const {
  CLEAVE_ASSERT(dys.size() == parts_.size() && stashes.size() == parts_.size(),
                "SharedInputParts: {} gradients and {} stashes for {} parts", dys.size(), stashes.size(),
                parts_.size());
  if (!sums_once()) {
    Tensor dx = parts_.front()->backward_input(dys.front(), *stashes.front(), ctx);
    for (std::size_t i = 1; i < parts_.size(); ++i) {
      ops::add_inplace(ctx, dx, parts_[i]->backward_input(dys[i], *stashes[i], ctx));
    }
    return dx;
  }
  const ColumnParallelLinear& first = *columns_.front();
  Tensor dx_partial = new_activation(ctx, with_last(dys.front().shape(), first.in_features()));
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    columns_[i]->backward_input_into(dys[i], dx_partial, /*accumulate=*/i > 0, *stashes[i], ctx);
  }
  if (shared(ctx)) {
    return sequence_reduce_scatter(dx_partial, ctx, first.tp_size(), first.tp_rank(), "shared column-parallel input");
  }
  tp_all_reduce(dx_partial, comm::ReduceOp::kSum, ctx, first.tp_size(), first.tp_rank(),
                "shared column-parallel input");
  return dx_partial;
}

void SharedInputParts::backward_weight(std::span<Stash* const> stashes, Context& ctx) const {
  CLEAVE_ASSERT(stashes.size() == parts_.size(), "SharedInputParts: {} stashes for {} parts", stashes.size(),
                parts_.size());
  if (!shared(ctx)) {
    for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i]->backward_weight(*stashes[i], ctx);
    return;
  }
  const ColumnParallelLinear& first = *columns_.front();
  const Tensor full = sequence_all_gather(stash_at(*stashes.front(), 0, "shared column-parallel input"), ctx,
                                          first.tp_size(), first.tp_rank(), "shared column-parallel input");
  for (std::size_t i = 0; i < parts_.size(); ++i) columns_[i]->backward_weight_gathered(full, *stashes[i], ctx);
}

}  // namespace cleave::layers
