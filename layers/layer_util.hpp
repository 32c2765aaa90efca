// Small helpers shared by the layers: allocating outputs and scratch from the context's allocator,
// checking a layer's input, and reading a stash slot.
//
// Invariant: every tensor a layer creates during forward / backward goes through new_activation()
// (category kActivations) or new_workspace() (kWorkspace) on ctx.allocator, so the allocator's counters
// show exactly what the schedule keeps alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/core/tensor.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

// Activations default to the context's compute dtype (bf16 under mixed precision); pass DType::kF32 for
// statistics that stay f32 (LayerNorm mean/rstd, log-sum-exp, the loss).
Tensor new_activation(const Context& ctx, const Shape& shape);
Tensor new_activation(const Context& ctx, const Shape& shape, DType dtype);
Tensor new_workspace(const Context& ctx, const Shape& shape, DType dtype = DType::kF32);

// Mixed precision (ctx.precision kBf16): every parameter's bf16 working copy (Param::working) := its f32 master
// value, rounded to nearest even; allocated on first use on ctx.allocator (kParameters). A no-op in fp32.
void refresh_working_copies(const std::vector<std::shared_ptr<Param>>& params, const Context& ctx);

// `dtype` kF32 means any floating input (f32 or bf16).
// Throws Error unless x is a defined tensor on ctx.device of `dtype` whose last dimension is `last` (any last when
// last < 0) and whose rank is at least `min_rank`. `who` names the layer ("linear blocks.0.attn.qkv"), `input` the
// input when it is not the layer's x ("dy": the message says "linear blocks.0.attn.qkv (dy)"); both are only read
// when the check fails, so a layer passes names it built once (no string per call).
void check_input(const Context& ctx, const Tensor& x, DType dtype, std::int64_t last, int min_rank, std::string_view who,
                 std::string_view input = {});

// `shape` with its last dimension replaced by `last`.
Shape with_last(const Shape& shape, std::int64_t last);

// stash.tensors[i], asserting the slot exists (a missing slot means backward ran without forward).
const Tensor& stash_at(const Stash& stash, std::size_t i, std::string_view who);

// A loss block's evaluate() result: the rows `targets` scores and those whose first arg-max (`neg_index`, negated
// as ops::cross_entropy_shard_argmax writes it) is the target (ops::count_correct), and the mean `loss` times those
// rows. Blocks the host on the stream (one read-back of the count, one of the loss's float).
EvalCounts eval_counts(const Context& ctx, const Tensor& loss, const Tensor& neg_index, const Tensor& targets);

}  // namespace cleave::layers
