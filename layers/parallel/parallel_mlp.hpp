// ParallelMlp: Mlp split across the tp group (Megatron): fc ColumnParallelLinear ("<prefix>.fc", D -> F,
// output features split) -> GELU on the local F / tp columns -> proj RowParallelLinear ("<prefix>.proj",
// F -> D, all-reduced output). Input and output [..., D] are replicated; the hidden activation never is.
// Communication: one all-reduce in forward, one in backward_input. Names and initial values equal Mlp's.
//
// Stash layout: children {fc, gelu, proj}; no tensors of its own.
#pragma once

#include <memory>
#include <string>

#include "layers/gelu.hpp"
#include "layers/layer.hpp"
#include "layers/param_init.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/row_parallel_linear.hpp"

namespace cleave::layers {

class ParallelMlp final : public Layer {
 public:
  // d_ff must be divisible by tp_size.
  ParallelMlp(std::string prefix, std::int64_t d_model, std::int64_t d_ff, const ParamInit& init,
              const ParamInit& proj_init, int tp_size, int tp_rank);

  std::string_view kind() const override { return "parallel_mlp"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  std::string prefix_;
  ColumnParallelLinear fc_;
  Gelu gelu_;
  RowParallelLinear proj_;
};

}  // namespace cleave::layers
