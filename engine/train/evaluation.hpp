// Evaluation: forward-only passes over `batches` global evaluation batches through an executor in
// ExecutorMode::kEvaluate, scored by the model's loss block; the counts are summed over the world.
#pragma once

#include <cstdint>

#include "engine/train/eval_result.hpp"
#include "engine/train/rank_setup.hpp"
#include "pipeline/executor.hpp"

namespace cleave::train {

// Runs the executor over evaluation batches 0 .. batches - 1 (each index goes to its data callback).
// Collective over the world.
EvalResult evaluate_batches(RankSetup& setup, pipeline::Executor& executor, std::int64_t batches);

}  // namespace cleave::train
