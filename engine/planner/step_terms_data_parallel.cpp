// The data_parallel term (docs/planner.md, "The step, term by term"): a stage's gradient reduction over the
// replicas in REDUCE_GRAD (ZeRO 0 an all-reduce, ZeRO 1-3 a reduce-scatter; under ep the routed experts' over the
// expert-dp group), ZeRO-1/2's all-gather after the optimizer step, per-micro-batch reductions behind W, and the
// reduction overlapped block by block with the backward (--overlap-grad-reduce); ZeRO-2 per micro-batch on more ranks
// than cores bucket by bucket (zero2_bucket_reduction, microbatch_buckets.hpp). Invariant: exposed + hidden = the
// reductions' whole time.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

#include "engine/planner/microbatch_buckets.hpp"

namespace cleave::planner {

using partition::Collective;

namespace {

// A reduction of `grad_bytes` over `n` ranks (the replicas, or the expert-dp group), per micro-batch or per step.
GradientReduction reduction_over(const TermContext& c, double grad_bytes, double w_free, int n, bool per_microbatch) {
  const config::RunConfig& config = *c.config;
  const Link& link = *c.dp_link;  // an expert-dp group spans the replicas' ranks with stride ep: the same link
  GradientReduction x;
  const double wire = config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16 ? grad_bytes / 2 : grad_bytes;
  const bool gathers_after_step = c.zero == 1 || c.zero == 2;
  // ZeRO 0 all-reduces the gradients; 1, 2 and 3 reduce-scatter them (half an all-reduce's bytes: each replica
  // keeps its shard); 1 and 2 then all-gather the updated parameters after the optimizer step (3 keeps them
  // sharded and gathers per block, zero3_stage_gathers).
  x.reduce_s = c.zero == 0 ? c.collective_s(Collective::kAllReduce, wire, n, link)
                           : c.collective_s(Collective::kReduceScatter, wire, n, link);
  // The gather moves the f32 master values (the engine's trainer), or the bf16 parameters of a bf16 run
  // (SearchOptions::param_gather_bf16: Megatron-LM's distributed optimizer).
  const double gathered = c.options->param_gather_bf16 && c.bf16 ? grad_bytes / 2 : grad_bytes;
  x.step_gather_s = gathers_after_step ? c.collective_s(Collective::kAllGather, gathered, n, link) : 0.0;
  // Each collective a meeting of the replicas: its handoffs to time-shared peers (0 otherwise).
  if (n > 1 && grad_bytes > 0) {
    x.reduce_s += handoff_wait_s(c, c.zero == 0 ? Exchange::kAllReduce : Exchange::kReduceScatter, n);
    if (gathers_after_step) x.step_gather_s += handoff_wait_s(c, Exchange::kAllGather, n);
  }
  x.bytes = ring_bytes(wire, n, c.zero == 0) + (gathers_after_step ? ring_bytes(gathered, n, false) : 0.0);
  if (per_microbatch) {
    // optimizer.zero_reduce per_microbatch: every micro-batch reduce-scatters the stage's gradients. The last
    // one is REDUCE_GRAD's (above); each earlier one runs behind the next weight-gradient pass, and what the
    // pass cannot hide lengthens it (spread over the stage's W actions).
    const double m = c.micro_batches;
    const double hidden_by = w_free;
    x.per_w_exposed_s = m > 1 ? std::max(0.0, x.reduce_s - hidden_by) * (m - 1) / m : 0.0;
    x.per_w_hidden_s = m > 1 ? std::min(x.reduce_s, hidden_by) * (m - 1) / m : 0.0;
    x.bytes += (m - 1) * ring_bytes(wire, n, false);
  }
  return x;
}

}  // namespace

GradientReduction gradient_reduction(const TermContext& c, double grad_bytes, double w_free) {
  return reduction_over(c, grad_bytes, w_free, c.replicas, c.per_microbatch);
}

GradientReduction zero2_bucket_reduction(const TermContext& c, const GradientReduction& whole,
                                         const std::vector<double>& block_bytes, double table_bytes, double w_free) {
  if (!(c.zero == 2 && c.per_microbatch && c.handoff_s > 0 && c.replicas > 1)) return whole;
  const double cap = c.config->parallel.dp_bucket_mb * 1024.0 * 1024.0;
  const std::vector<double> buckets = microbatch_buckets(block_bytes, table_bytes, cap);
  if (buckets.empty()) return whole;
  const bool bf16_wire = c.config->parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16;
  double block_total = 0;
  for (const double b : block_bytes) block_total += std::max(0.0, b);
  const std::size_t n = buckets.size();
  std::vector<double> reduce(n), hide(n);
  for (std::size_t j = 0; j < n; ++j) {
    // Each bucket a meeting of the replicas: its reduce-scatter and its own handoffs.
    reduce[j] = c.collective_s(Collective::kReduceScatter, bf16_wire ? buckets[j] / 2 : buckets[j], c.replicas, *c.dp_link) +
                handoff_wait_s(c, Exchange::kReduceScatter, c.replicas);
    // Settled at the next launch: hidden by the backward of the next bucket's blocks (by their share of the bytes);
    // by nothing before the table's (ready with the lowest block); the last by the next micro-batch's W.
    const bool next_is_table = table_bytes > 0 && j + 2 == n;
    hide[j] = j + 1 == n          ? w_free
              : next_is_table     ? 0.0
              : block_total > 0   ? w_free * buckets[j + 1] / block_total
                                  : 0.0;
  }
  GradientReduction x = whole;
  x.reduce_s = 0;
  for (const double r : reduce) x.reduce_s += r;
  const MicrobatchExposure e = microbatch_exposure(reduce, hide);
  const double m = c.micro_batches;
  x.per_w_exposed_s = m > 1 ? e.exposed_s * (m - 1) / m : 0.0;
  x.per_w_hidden_s = m > 1 ? e.hidden_s * (m - 1) / m : 0.0;
  return x;
}

GradientReduction expert_gradient_reduction(const TermContext& c, double grad_bytes) {
  return reduction_over(c, grad_bytes, 0.0, c.expert_replicas, false);
}

double overlapped_reduction_s(const std::vector<double>& transfer, const std::vector<double>& compute) {
  double computed = 0, sent = 0;
  for (std::size_t k = 0; k < transfer.size(); ++k) {
    computed += k < compute.size() ? compute[k] : 0.0;
    sent = std::max(sent, computed) + transfer[k];
  }
  return std::max(0.0, sent - computed);
}

}  // namespace cleave::planner
