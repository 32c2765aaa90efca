// Tensor-parallel layout of the layers: the per-rank boundary shapes, and (re-exported from
// partition/tp_rules.hpp, their one home) the checks of which tensor-parallel sizes a model allows. The
// checks run before anything is built (build_blocks calls check_tensor_parallel first); their errors name
// the config key, the numbers and the sizes that work.
#pragma once

#include "engine/core/shape.hpp"
#include "partition/model_spec.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::layers {

using partition::allowed_tp_sizes;
using partition::check_tensor_parallel;
using partition::check_tp_d_ff;
using partition::check_tp_heads;

// Per-sample (no batch dimension) shapes of the tensors one tp rank's layer for `block` consumes and
// produces. Every boundary tensor of a tensor-parallel gpt is replicated (block.input / block.output)
// except the vocab-parallel logits between the lm head and the loss: [T, ceil(V / tp)] on each rank. A
// pipeline boundary between those two blocks carries that local shape (tp rank r to tp rank r).
Shape tp_block_input(const partition::BlockSpec& block, int tp_size);
Shape tp_block_output(const partition::BlockSpec& block, int tp_size);

}  // namespace cleave::layers
