// Row-parallel linear layer: Linear's GEMMs on the shard, the tp all-reduce of the output (or under sequence
// parallelism its reduce-scatter along the sequence), then the replicated bias.
#include "layers/parallel/row_parallel_linear.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/sharded_param.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

namespace {

std::shared_ptr<Param> row_weight(const std::string& prefix, std::int64_t in, std::int64_t out, const ParamInit& init,
                                  int tp_size, int tp_rank) {
  const std::string who = "row_parallel_linear " + prefix;
  check_tp_coordinates(tp_size, tp_rank, who);
  CLEAVE_CHECK(in > 0 && out > 0, "{}: sizes must be > 0, got in {} out {}", who, in, out);
  CLEAVE_CHECK(in % tp_size == 0, "{}: {} input features do not split over {} tensor-parallel ranks", who, in,
               tp_size);
  auto w = make_sharded_param(prefix + ".weight", make_shard_spec(Shape{out, in}, 1, tp_size, tp_rank), true,
                              init.allocator);
  init_shard_weight(*w, in, init);
  return w;
}

}  // namespace

RowParallelLinear::RowParallelLinear(std::string prefix, std::int64_t in_features, std::int64_t out_features,
                                     bool bias, const ParamInit& init, int tp_size, int tp_rank)
    : prefix_(std::move(prefix)),
      tp_size_(tp_size),
      tp_rank_(tp_rank),
      local_(prefix_, row_weight(prefix_, in_features, out_features, init, tp_size, tp_rank), nullptr) {
  if (bias) {
    bias_ = make_param(prefix_ + ".bias", Shape{out_features}, false, init.allocator);
    init_bias(*bias_, in_features, init);
  }
}

Tensor RowParallelLinear::forward(const Tensor& x, Stash& stash, Context& ctx) {
  tp_group(ctx, tp_size_, tp_rank_, who());
  Tensor y = local_.forward(x, stash, ctx);
  if (sequence_parallel(ctx, tp_size_)) {
    y = sequence_reduce_scatter(y, ctx, tp_size_, tp_rank_, who());
  } else {
    tp_all_reduce(y, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, who());
  }
  if (bias_) ops::bias_add_forward(ctx, y, bias_->compute());
  return y;
}

Tensor RowParallelLinear::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  if (!sequence_parallel(ctx, tp_size_)) return local_.backward_input(dy, stash, ctx);
  check_input(ctx, dy, DType::kF32, local_.out_features(), 3, who(), "dy");
  Tensor dx = local_.backward_input(sequence_all_gather(dy, ctx, tp_size_, tp_rank_, who()), stash, ctx);
  // The shard: the bias gradient of this rank's tokens. Without a bias nothing reads it (the weight gradient
  // reads the gathered dy), so it is not kept until W.
  if (bias_) stash.tensors.push_back(dy);
  return dx;
}

void RowParallelLinear::backward_weight(Stash& stash, Context& ctx) {
  if (bias_) {
    // Under sequence parallelism slot 2 holds this rank's dy shard: a partial gradient, summed over tp later.
    const Tensor& dy = stash.tensors.size() > 2 ? stash.tensors[2] : stash_at(stash, 1, who());
    ops::bias_backward(ctx, dy, bias_->grad);
  }
  local_.backward_weight(stash, ctx);
}

std::vector<std::shared_ptr<Param>> RowParallelLinear::params() const {
  if (bias_) return {local_.weight(), bias_};
  return {local_.weight()};
}

}  // namespace cleave::layers
