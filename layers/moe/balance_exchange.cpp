// Context parallelism's count exchange for the load-balancing loss (see balance_exchange.hpp).
#include "layers/moe/balance_exchange.hpp"

#include <algorithm>

#include "engine/comm/communicator.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/comm_wait.hpp"

namespace cleave::layers {
namespace {

// Row s: sample s's tokens' counts per expert, then its token count (its rows of `routing`, sample-major).
void fill_sample_counts(const Routing& routing, std::int64_t samples, std::int64_t* rows) {
  const std::int64_t e = routing.experts, k = routing.top_k, per_sample = routing.tokens / samples;
  std::fill(rows, rows + samples * (e + 1), std::int64_t{0});
  for (std::int64_t t = 0; t < routing.tokens; ++t) {
    std::int64_t* row = rows + (t / per_sample) * (e + 1);
    for (std::int64_t j = 0; j < k; ++j) ++row[routing.expert[static_cast<std::size_t>(t * k + j)]];
  }
  for (std::int64_t s = 0; s < samples; ++s) rows[s * (e + 1) + e] = per_sample;
}

}  // namespace

BalanceExchange post_balance_exchange(const Routing& routing, std::int64_t samples, const RouterOptions& router,
                                      Context& ctx) {
  if (ctx.cp_comm == nullptr || ctx.cp_comm->size() == 1 || router.aux_coef == 0.0) return {};
  CLEAVE_ASSERT(samples > 0 && routing.tokens % samples == 0, "balance exchange: {} tokens in {} samples",
                routing.tokens, samples);
  const Shape shape{samples, routing.experts + 1};
  BalanceExchange x;
  x.sums = Tensor::empty(shape, DType::kI64, MemoryCategory::kActivations, *ctx.allocator);
  if (ctx.device.is_cpu() && ctx.upload_staging == nullptr) {
    fill_sample_counts(routing, samples, x.sums.data<std::int64_t>());
  } else {  // an asynchronous upload from page-locked memory (a pageable source would make CUDA wait for the
            // stream first): the staging row stays in the stash until the backward has synchronised. A CPU
            // context with a staging allocator of its own (a test's counting one) stages the row as a GPU does,
            // so the memory plan's host line can be checked on the CPU (moe_mlp.cpp's upload_async likewise)
    x.staging = Tensor::empty(shape, DType::kI64, MemoryCategory::kActivations, ctx.staging_allocator());
    fill_sample_counts(routing, samples, x.staging.data<std::int64_t>());
    ops::transfer(ctx, x.staging, x.sums);
  }
  const CommWaitTimer timer(ctx, CommKind::kContextParallel);  // the posting only: the wait is in the backward
  x.work = ctx.cp_comm->all_reduce(x.sums, comm::ReduceOp::kSum, *ctx.stream);
  return x;
}

SequenceBalance finish_balance_exchange(const BalanceExchange& exchange, std::int64_t experts, Context& ctx) {
  CLEAVE_ASSERT(exchange.sums.defined() && exchange.work != nullptr, "balance exchange: nothing was posted");
  {
    const CommWaitTimer timer(ctx, CommKind::kContextParallel);
    exchange.work->wait();
  }
  const Tensor host = ctx.device.is_cpu() ? exchange.sums : ops::to_host(ctx, exchange.sums);
  const std::int64_t samples = host.dim(0);
  CLEAVE_ASSERT(host.dim(1) == experts + 1, "balance exchange: rows of {} for {} experts", host.dim(1), experts);
  const auto* v = host.data<std::int64_t>();
  SequenceBalance out;
  out.counts.assign(static_cast<std::size_t>(experts), 0);
  for (std::int64_t s = 0; s < samples; ++s) {
    for (std::int64_t i = 0; i < experts; ++i) out.counts[static_cast<std::size_t>(i)] += v[s * (experts + 1) + i];
    out.tokens += v[s * (experts + 1) + experts];
  }
  return out;
}

}  // namespace cleave::layers
