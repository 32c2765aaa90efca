// Column-parallel linear layer: Linear's GEMMs on the shard plus the tp all-reduce of dx, or under sequence
// parallelism the all-gather of x and the reduce-scatter of dx.
#include "layers/parallel/column_parallel_linear.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/sharded_param.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

namespace {

std::shared_ptr<Param> column_weight(const std::string& prefix, std::int64_t in, std::int64_t out,
                                     const ParamInit& init, int tp_size, int tp_rank, int groups) {
  const std::string who = "column_parallel_linear " + prefix;
  check_tp_coordinates(tp_size, tp_rank, who);
  CLEAVE_CHECK(in > 0 && out > 0, "{}: sizes must be > 0, got in {} out {}", who, in, out);
  CLEAVE_CHECK(groups >= 1 && out % (static_cast<std::int64_t>(groups) * tp_size) == 0,
               "{}: {} output features do not split into {} group(s) x {} tensor-parallel ranks", who, out, groups,
               tp_size);
  auto w = make_sharded_param(prefix + ".weight", make_shard_spec(Shape{out, in}, 0, tp_size, tp_rank, groups), true,
                              init.allocator);
  init_shard_weight(*w, in, init);
  return w;
}

std::shared_ptr<Param> column_bias(const std::string& prefix, std::int64_t in, std::int64_t out, bool bias,
                                   const ParamInit& init, int tp_size, int tp_rank, int groups) {
  if (!bias) return nullptr;
  auto b = make_sharded_param(prefix + ".bias", make_shard_spec(Shape{out}, 0, tp_size, tp_rank, groups), false,
                              init.allocator);
  init_shard_bias(*b, in, init);
  return b;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(std::string prefix, std::int64_t in_features, std::int64_t out_features,
                                           bool bias, const ParamInit& init, int tp_size, int tp_rank, int groups)
    : prefix_(std::move(prefix)),
      tp_size_(tp_size),
      tp_rank_(tp_rank),
      local_(prefix_, column_weight(prefix_, in_features, out_features, init, tp_size, tp_rank, groups),
             column_bias(prefix_, in_features, out_features, bias, init, tp_size, tp_rank, groups)) {}

ColumnParallelLinear::ColumnParallelLinear(std::string prefix, std::shared_ptr<Param> weight,
                                           std::shared_ptr<Param> bias, int tp_size, int tp_rank)
    : prefix_(std::move(prefix)), tp_size_(tp_size), tp_rank_(tp_rank), local_(prefix_, weight, bias) {
  check_tp_coordinates(tp_size, tp_rank, who());
  const ShardSpec& s = weight->shard;
  CLEAVE_ASSERT(tp_size == 1 ? s.dim <= 0 : (s.dim == 0 && s.parts == tp_size && s.index == tp_rank),
                "{}: weight '{}' is not row shard {} of {} (dim {}, index {} of {})", who(), weight->name, tp_rank,
                tp_size, s.dim, s.index, s.parts);
}

Tensor ColumnParallelLinear::forward(const Tensor& x, Stash& stash, Context& ctx) {
  tp_group(ctx, tp_size_, tp_rank_, who());  // a wrong context fails here, before any collective
  if (!sequence_parallel(ctx, tp_size_)) return local_.forward(x, stash, ctx);
  check_input(ctx, x, DType::kF32, local_.in_features(), 3, who());
  return forward_gathered(x, sequence_all_gather(x, ctx, tp_size_, tp_rank_, who()), stash, ctx);
}

Tensor ColumnParallelLinear::forward_gathered(const Tensor& x, const Tensor& full, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(sequence_parallel(ctx, tp_size_) && full.rank() == 3 && x.rank() == 3 && full.dim(0) == x.dim(0) &&
                    full.dim(1) == x.dim(1) * tp_size_,
                "{}: {} is not the gathered full sequence of the shard {}", who(), full.shape().str(),
                x.shape().str());
  Tensor y = local_.forward(full, stash, ctx);
  stash.tensors = {x};  // the shard, not the gathered input: backward_weight gathers it again
  return y;
}

Tensor ColumnParallelLinear::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  if (!sequence_parallel(ctx, tp_size_)) {
    Tensor dx = local_.backward_input(dy, stash, ctx);
    tp_all_reduce(dx, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, who());
    return dx;
  }
  Tensor dx_partial = new_activation(ctx, with_last(dy.shape(), local_.in_features()));
  backward_input_into(dy, dx_partial, false, stash, ctx);
  return sequence_reduce_scatter(dx_partial, ctx, tp_size_, tp_rank_, who());
}

void ColumnParallelLinear::backward_input_into(const Tensor& dy, const Tensor& dx_full, bool accumulate, Stash& stash,
                                               Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  check_input(ctx, dy, DType::kF32, local_.out_features(), 3, who(), "dy");
  const std::int64_t shards = sequence_parallel(ctx, tp_size_) ? tp_size_ : 1;  // x: a sequence shard, or whole
  CLEAVE_ASSERT(dy.dim(0) == x.dim(0) && dy.dim(1) == x.dim(1) * shards &&
                    dx_full.shape() == with_last(dy.shape(), local_.in_features()),
                "{}: dy {} / dx {} is not the full sequence of the x {}", who(), dy.shape().str(),
                dx_full.shape().str(), x.shape().str());
  ops::GemmOptions options;
  options.beta = accumulate ? 1.0f : 0.0f;
  ops::gemm(ctx, dy, local_.weight()->compute(), dx_full, options);  // this rank's output features' share of dx
  stash.tensors.push_back(dy);
}

void ColumnParallelLinear::backward_weight(Stash& stash, Context& ctx) {
  if (!sequence_parallel(ctx, tp_size_)) {
    local_.backward_weight(stash, ctx);
    return;
  }
  backward_weight_gathered(sequence_all_gather(stash_at(stash, 0, who()), ctx, tp_size_, tp_rank_, who()), stash,
                           ctx);
}

void ColumnParallelLinear::backward_weight_gathered(const Tensor& full, Stash& stash, Context& ctx) {
  stash_at(stash, 1, who());
  stash.tensors[0] = full;
  local_.backward_weight(stash, ctx);
}

}  // namespace cleave::layers
