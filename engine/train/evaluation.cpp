// evaluate_batches (evaluation.hpp): forward-only passes over the evaluation set through the same Executor as training (a
// forward-only schedule, pipeline/forward_only.hpp), scored by the model's loss block — vocab-parallel under
// tensor parallelism, so every tp rank's vocabulary shard takes part.
//
// Invariant: each evaluated row is counted once: by tp rank 0 of the rank holding the last stage, in every
// replica (replicas read disjoint shards of each evaluation batch).
#include "engine/core/error.hpp"
#include "engine/train/collectives.hpp"
#include "engine/train/evaluation.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

EvalResult evaluate_batches(RankSetup& s, pipeline::Executor& executor, std::int64_t batches) {
  const bool counts = s.counts_loss();
  double loss_sum = 0, correct = 0, items = 0;
  for (std::int64_t b = 0; b < batches; ++b) {
    const pipeline::StepOutcome& outcome = executor.run_step(b);  // the executor's, until its next run_step
    ops::check_device_status(s.context);  // bad token ids / targets a GPU kernel recorded (no-op on the CPU)
    if (!counts) continue;
    for (const auto& [microbatch, c] : outcome.evaluations) {
      loss_sum += c.loss_sum;
      correct += static_cast<double>(c.correct);
      items += static_cast<double>(c.rows);
    }
  }
  const auto sums = reduce_doubles(s.world, {loss_sum, correct, items}, comm::ReduceOp::kSum);
  EvalResult result;
  result.items = static_cast<std::int64_t>(std::llround(sums[2]));
  result.loss = result.items > 0 ? sums[0] / sums[2] : 0.0;
  result.accuracy = result.items > 0 ? sums[1] / sums[2] : 0.0;
  return result;
}

}  // namespace cleave::train
