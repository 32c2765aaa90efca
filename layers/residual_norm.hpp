// A norm that can take a pre-norm block's residual add with it (ops.hpp add_rmsnorm_*): what TransformerBlock asks
// its second norm for, whichever norm it holds; a norm without it runs the unfused pair.
//
// Invariant: the fused calls give the bits, the stash and the returned tensors of the unfused pair
//   forward:        branch += residual; y = forward(branch)       (branch is the new residual stream)
//   backward_input: dx = backward_input(dy); dx += dresidual
// so a block may use either form and every equivalence with the unfused block still holds.
#pragma once

#include "layers/layer.hpp"

namespace cleave::layers {

class ResidualNorm {
 public:
  virtual ~ResidualNorm() = default;
  // Writes branch := branch + residual (in place) and returns the norm of the sum; stashes as forward(branch).
  virtual Tensor forward_residual(const Tensor& branch, const Tensor& residual, Stash& stash, Context& ctx) = 0;
  // Returns backward_input(dy) + dresidual (dresidual is read, never written); stashes as backward_input(dy).
  virtual Tensor backward_input_residual(const Tensor& dy, const Tensor& dresidual, Stash& stash, Context& ctx) = 0;
};

}  // namespace cleave::layers
