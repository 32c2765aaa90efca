// Tensor-parallel transformer MLP on the CPU: ColumnParallelLinear, Gelu, RowParallelLinear.
#include "layers/parallel/parallel_mlp.hpp"

#include "engine/core/error.hpp"
#include "layers/parallel/tp_layout.hpp"

namespace cleave::layers {

namespace {
std::int64_t checked_d_ff(std::int64_t d_ff, int tp_size) {
  check_tp_d_ff(d_ff, tp_size);
  return d_ff;
}
}  // namespace

ParallelMlp::ParallelMlp(std::string prefix, std::int64_t d_model, std::int64_t d_ff, const ParamInit& init,
                         const ParamInit& proj_init, int tp_size, int tp_rank)
    : prefix_(std::move(prefix)),
      fc_(prefix_ + ".fc", d_model, checked_d_ff(d_ff, tp_size), true, init, tp_size, tp_rank),
      gelu_(prefix_ + ".gelu"),
      proj_(prefix_ + ".proj", d_ff, d_model, true, proj_init, tp_size, tp_rank) {}

Tensor ParallelMlp::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.clear();
  stash.children.resize(3);
  Tensor h = fc_.forward(x, stash.children[0], ctx);
  Tensor g = gelu_.forward(h, stash.children[1], ctx);
  return proj_.forward(g, stash.children[2], ctx);
}

Tensor ParallelMlp::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 3, "parallel mlp {}: backward_input without forward", prefix_);
  Tensor dg = proj_.backward_input(dy, stash.children[2], ctx);
  Tensor dh = gelu_.backward_input(dg, stash.children[1], ctx);
  return fc_.backward_input(dh, stash.children[0], ctx);
}

void ParallelMlp::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 3, "parallel mlp {}: backward_weight without forward", prefix_);
  fc_.backward_weight(stash.children[0], ctx);
  gelu_.backward_weight(stash.children[1], ctx);
  proj_.backward_weight(stash.children[2], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> ParallelMlp::params() const {
  auto out = fc_.params();
  for (auto& p : proj_.params()) out.push_back(p);
  return out;
}

}  // namespace cleave::layers
