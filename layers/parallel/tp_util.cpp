// Tensor-parallel layer helpers (see tp_util.hpp).
#include "layers/parallel/tp_util.hpp"

#include "engine/core/error.hpp"
#include "layers/comm_wait.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

void check_tp_coordinates(int tp_size, int tp_rank, std::string_view who) {
  CLEAVE_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size,
               "{}: tensor-parallel rank {} must be in [0, tp_size {}) and tp_size >= 1", who, tp_rank, tp_size);
}

comm::Communicator* tp_group(const Context& ctx, int tp_size, int tp_rank, std::string_view who) {
  if (tp_size == 1) return nullptr;
  CLEAVE_CHECK(ctx.tp_comm != nullptr,
               "{}: built for tensor parallelism over {} ranks, but the context has no tp communicator "
               "(Context::tp_comm)",
               who, tp_size);
  CLEAVE_CHECK(ctx.tp_comm->size() == tp_size && ctx.tp_comm->rank() == tp_rank,
               "{}: built as tp rank {} of {}, but the context's tp communicator '{}' is rank {} of {}", who,
               tp_rank, tp_size, ctx.tp_comm->name(), ctx.tp_comm->rank(), ctx.tp_comm->size());
  return ctx.tp_comm;
}

void tp_all_reduce(const Tensor& tensor, comm::ReduceOp op, const Context& ctx, int tp_size, int tp_rank,
                   std::string_view who) {
  comm::Communicator* group = tp_group(ctx, tp_size, tp_rank, who);
  if (group == nullptr) return;
  const CommWaitTimer timer(ctx, CommKind::kTensorParallel);
  group->all_reduce(tensor, op, *ctx.stream)->wait();
}

bool sequence_parallel(const Context& ctx, int tp_size) { return ctx.sequence_parallel && tp_size > 1; }

namespace {

// [B, T, ...] with T replaced by `t`.
Shape with_sequence(const Tensor& x, std::int64_t t) { return x.shape().with_dim(1, t); }

void check_sequence_input(const Tensor& x, std::string_view who, std::string_view what) {
  CLEAVE_CHECK(x.defined() && x.rank() >= 3,
               "{}: sequence parallelism needs {} [batch, seq, features], got {}", who, what,
               x.defined() ? x.shape().str() : std::string("an undefined tensor"));
}

// One collective per batch entry (tp_util.hpp: sample b's full sequence is contiguous), issued together.
template <typename Issue>
void per_sample(const Context& ctx, std::int64_t batch, Issue issue) {
  const CommWaitTimer timer(ctx, CommKind::kTensorParallel);
  std::vector<comm::WorkPtr> works;
  works.reserve(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) works.push_back(issue(b));
  for (auto& w : works) w->wait();
}

}  // namespace

Tensor sequence_all_gather(const Tensor& local, const Context& ctx, int tp_size, int tp_rank, std::string_view who) {
  check_sequence_input(local, who, "a sequence shard");
  comm::Communicator* group = tp_group(ctx, tp_size, tp_rank, who);
  CLEAVE_ASSERT(group != nullptr, "{}: sequence all-gather without a tp group", who);
  Tensor full = new_activation(ctx, with_sequence(local, local.dim(1) * tp_size), local.dtype());
  per_sample(ctx, local.dim(0), [&](std::int64_t b) {
    return group->all_gather(local.slice(b, b + 1), full.slice(b, b + 1), *ctx.stream);
  });
  return full;
}

Tensor sequence_reduce_scatter(const Tensor& full, const Context& ctx, int tp_size, int tp_rank,
                               std::string_view who) {
  check_sequence_input(full, who, "a full sequence");
  comm::Communicator* group = tp_group(ctx, tp_size, tp_rank, who);
  CLEAVE_ASSERT(group != nullptr, "{}: sequence reduce-scatter without a tp group", who);
  const std::int64_t t = full.dim(1);
  CLEAVE_CHECK(t % tp_size == 0,
               "{}: sequence parallelism splits each sequence over the {} tensor-parallel ranks, but the sequence "
               "has {} tokens (model.seq_len must be divisible by parallel.tensor_model_parallel_size)",
               who, tp_size, t);
  Tensor local = new_activation(ctx, with_sequence(full, t / tp_size), full.dtype());
  per_sample(ctx, full.dim(0), [&](std::int64_t b) {
    return group->reduce_scatter(full.slice(b, b + 1), local.slice(b, b + 1), comm::ReduceOp::kSum, *ctx.stream);
  });
  return local;
}

void sum_replicated_grads_over_tp(const std::vector<Param*>& params, const Context& ctx) {
  CLEAVE_ASSERT(ctx.tp_comm != nullptr, "summing replicated gradients over tp without a tp communicator");
  std::vector<comm::WorkPtr> works;
  for (Param* p : params) {
    if (p->shard.dim < 0) works.push_back(ctx.tp_comm->all_reduce(p->grad, comm::ReduceOp::kSum, *ctx.stream));
  }
  for (auto& w : works) w->wait();
}

}  // namespace cleave::layers
