// The measured timeline of a training step (train.trace): every pp rank's timed actions of replica 0 (dp 0,
// tp 0) merged on world rank 0 (times in ms from the earliest action), and written there as a Chrome trace
// (trace.json) and an SVG (trace.svg). Collective over the world.
#pragma once

#include <string>
#include <vector>

#include "engine/train/rank_setup.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::train {

// Empty on every rank but world rank 0.
pipeline::Timeline gather_timeline(RankSetup& setup, const std::vector<pipeline::TimedAction>& last_step);
void write_measured_trace(RankSetup& setup, const std::vector<pipeline::TimedAction>& last_step,
                          const std::string& directory);

}  // namespace cleave::train
