// Tensor-parallel layout of the layers, re-exported from partition/tp_rules.hpp (their one home, shared with
// the plan): the per-rank boundary shapes (tp_block_input / tp_block_output: every boundary tensor replicated
// except the vocab-parallel logits, [T, ceil(V / tp)]) and the checks of which tensor-parallel sizes a model
// allows. The checks run before anything is built (build_blocks calls check_tensor_parallel first); their
// errors name the config key, the numbers and the sizes that work.
#pragma once

#include "engine/core/shape.hpp"
#include "partition/model_spec.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::layers {

using partition::allowed_tp_sizes;
using partition::check_tensor_parallel;
using partition::check_tp_d_ff;
using partition::check_tp_heads;
using partition::tp_block_input;
using partition::tp_block_output;

}  // namespace cleave::layers
