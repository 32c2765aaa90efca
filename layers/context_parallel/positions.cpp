// Learned positions at global positions (see positions.hpp).
#include "layers/context_parallel/positions.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/attention_core.hpp"

namespace cleave::layers {
namespace {

template <typename Op>
void over_runs(const Context& ctx, const Tensor& x, const Tensor& table, std::int64_t local_tokens, std::int64_t first,
               Op op) {
  const std::int64_t b = x.dim(0), n = x.dim(1);
  const CpSegments runs = ctx.cp.segments(local_tokens, first, n);
  if (runs.size() == 1) {
    op(ctx, x, table.slice(runs[0].global_begin, runs[0].global_begin + n));
    return;
  }
  for (std::int64_t s = 0; s < b; ++s) {
    for (const CpSegment& run : runs) {
      op(ctx, token_run(x, s, run.local_begin - first, run.length),
         table.slice(run.global_begin, run.global_begin + run.length));
    }
  }
}

}  // namespace

void add_positions(const Context& ctx, const Tensor& x, const Tensor& pos, std::int64_t local_tokens,
                   std::int64_t first) {
  over_runs(ctx, x, pos, local_tokens, first,
            [](const Context& c, const Tensor& xs, const Tensor& p) { ops::position_embedding_forward(c, xs, p); });
}

void add_position_grads(const Context& ctx, const Tensor& dx, const Tensor& dpos, std::int64_t local_tokens,
                        std::int64_t first) {
  over_runs(ctx, dx, dpos, local_tokens, first,
            [](const Context& c, const Tensor& d, const Tensor& p) { ops::position_embedding_backward(c, d, p); });
}

}  // namespace cleave::layers
