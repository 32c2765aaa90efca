// DualPipeV (DeepSeek-AI 2025, the V-shaped "cut-in-half" form of DeepSeek-V3's DualPipe, after Sea AI Lab):
// two chunks per rank in ZB-V's placement — rank r holds stage r (chunk 0, going down the ranks) and stage
// 2p − 1 − r (chunk 1, coming back up; the loss is on rank 0) — and in the steady state the forward of one
// micro-batch is paired with the backward of another, alternating chunks.
//
// Ordering rule on rank r (s0 = r, s1 = 2p − 1 − r; micro-batches in increasing order per stage and kind;
// "B s" = the full backward of stage s, written as I immediately followed by its W; "I s" = a zero-bubble
// backward whose W joins a FIFO queue; "W" = the oldest queued W):
//   1. 2(p − r − 1) × F s0
//   2. (r + 1) × [F s0, F s1]
//   3. (p − r − 1) × [I s1, W, F s1]
//   4. (m − 2p + r + 1) × [F s0, B s1, F s1, B s0]      the F&B pairs
//   5. (p − r − 1) × [B s1, F s1, B s0]
//   6. (r + 1) × [B s1, B s0], the later half as I (zero-bubble), the split point as in DeepSeek's code
//   7. (p − r − 1) × [W, I s0]
//   8. (r + 1) × W
// This is the order of DeepSeek's reference implementation (deepseek-ai/DualPipe, dualpipev.py), which needs
// m ≥ 2p micro-batches (fewer is an error naming the numbers).
// What is and is not overlapped: DeepSeek runs each F&B pair as one overlapped call, hiding one pass's
// communication (all-to-all in their MoE) behind the other's compute. This generator's schedule runs one action
// at a time per rank (a pair is the forward followed by the backward; the simulator times F&B as F + I + W);
// parallel.moe_a2a_overlap turns the pairs into overlapped ones (pipeline/overlap_schedule.hpp), which the
// executor interleaves at the MoE all-to-alls and the simulator times with the all-to-alls hidden.
// Warm-up: 2(p − r − 1) + (r + 1) chunk-0 forwards and r + 1 chunk-1 forwards before the first backward.
// Memory bound: 2p + 1 live chunk stashes on every rank (each chunk is half a rank's layers; DeepSeek's "PP + 1"
// with PP = 2p stages), one more than ZB-V.
// Bubble with F = I = W = 1 (F&B = F + I + W, nothing overlapped): makespan 6m + p − 1, the same as ZB-V, so
// bubble_fraction = (p − 1)/(6m + p − 1); every rank ends at the makespan, so rank r idles r units before its
// first action and p − 1 − r inside its span (ZB-V: 0 inside). Checked in generators_test.cpp.
#include <deque>
#include <utility>

#include "engine/core/error.hpp"
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {

int dualpipev_min_microbatches(int pp_size) { return 2 * pp_size; }

Schedule dualpipev_schedule(int pp_size, int num_microbatches) {
  detail::check_generator_args("dualpipev", pp_size, num_microbatches);
  const int p = pp_size, m = num_microbatches;
  CLEAVE_CHECK(m >= dualpipev_min_microbatches(p),
               "schedule dualpipev needs at least 2 × pp_size = {} micro-batches per step, got {} (pp_size {}); "
               "raise the micro-batches per step (batch.gradient_accumulation_steps) or use zb_v",
               dualpipev_min_microbatches(p), m, p);
  Schedule schedule =
      make_empty_schedule("dualpipev", p, m, 2, partition::place_stages(p, 2, partition::StagePlacement::kVShape));
  for (int r = 0; r < p; ++r) {
    const int s[2] = {r, 2 * p - 1 - r};
    int forwards[2] = {0, 0}, backwards[2] = {0, 0};
    std::deque<std::pair<int, int>> queued;  // (stage, micro-batch) of deferred W, oldest first
    auto& actions = schedule.ranks[r];
    auto forward = [&](int chunk) { actions.push_back({ActionKind::kForward, s[chunk], forwards[chunk]++}); };
    auto backward = [&](int chunk, bool zero_bubble) {
      const int j = backwards[chunk]++;
      actions.push_back({ActionKind::kBackwardInput, s[chunk], j});
      if (zero_bubble) {
        queued.emplace_back(s[chunk], j);
      } else {
        actions.push_back({ActionKind::kBackwardWeight, s[chunk], j});
      }
    };
    auto weight = [&] {
      CLEAVE_ASSERT(!queued.empty(), "dualpipev rank {}: no deferred W to run", r);
      actions.push_back({ActionKind::kBackwardWeight, queued.front().first, queued.front().second});
      queued.pop_front();
    };

    for (int k = 0; k < 2 * (p - r - 1); ++k) forward(0);
    for (int k = 0; k < r + 1; ++k) {
      forward(0);
      forward(1);
    }
    for (int k = 0; k < p - r - 1; ++k) {
      backward(1, true);
      weight();
      forward(1);
    }
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {
      forward(0);
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    for (int k = 0; k < p - r - 1; ++k) {
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    const int tail = r + 1;
    bool zero_bubble = false;
    for (int k = 0; k < tail; ++k) {
      if (k == tail / 2 && r % 2 == 1) zero_bubble = true;
      backward(1, zero_bubble);
      if (k == tail / 2 && r % 2 == 0) zero_bubble = true;
      backward(0, zero_bubble);
    }
    for (int k = 0; k < p - r - 1; ++k) {
      weight();
      backward(0, true);
    }
    for (int k = 0; k < r + 1; ++k) weight();
    CLEAVE_ASSERT(queued.empty() && forwards[0] == m && forwards[1] == m && backwards[0] == m && backwards[1] == m,
                  "dualpipev rank {}: F {}/{} I {}/{} of {}, {} W left", r, forwards[0], forwards[1], backwards[0],
                  backwards[1], m, queued.size());
  }
  return schedule;
}

}  // namespace cleave::pipeline
