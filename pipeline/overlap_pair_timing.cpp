// The baton of an overlapped F&B pair played out on costs (model in overlap_pair_timing.hpp).
#include "pipeline/overlap_pair_timing.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/core/error.hpp"

namespace cleave::pipeline {
namespace {

void check_side(const PairSide& s, const char* which) {
  CLEAVE_CHECK(std::isfinite(s.compute) && s.compute >= 0 && std::isfinite(s.all_to_all) && s.all_to_all >= 0,
               "overlapped pair: the {} side's compute {} and all-to-all {} must be finite and >= 0", which, s.compute,
               s.all_to_all);
  CLEAVE_CHECK(std::isfinite(s.tail) && s.tail >= 0 && s.tail <= s.compute,
               "overlapped pair: the {} side's tail {} must be finite, >= 0 and at most its compute {}", which, s.tail,
               s.compute);
  CLEAVE_CHECK(std::isfinite(s.own) && s.own >= 0 && s.own <= s.all_to_all,
               "overlapped pair: the {} side's own exchange time {} must be finite, >= 0 and at most its all-to-all {}",
               which, s.own, s.all_to_all);
  CLEAVE_CHECK(s.waits >= 0, "overlapped pair: the {} side has {} all-to-all waits, expected >= 0", which, s.waits);
}

// Exposed time of each side under the baton, both sides split into segments at their waits.
std::array<double, 2> baton_exposed(const std::array<PairSide, 2>& sides) {
  struct State {
    int segments_done = 0;
    double ready_at = 0;  // when the exchange it posted last is done
    bool finished = false;
  };
  std::array<State, 2> state{};
  std::array<double, 2> exposed{0, 0};
  double t = 0;
  int cur = 0;
  while (!(state[0].finished && state[1].finished)) {
    const PairSide& side = sides[static_cast<std::size_t>(cur)];
    State& st = state[static_cast<std::size_t>(cur)];
    if (st.segments_done > 0) {  // it took the rank back: what is left of its exchange, then the exchange's own time
      const double own = side.own / side.waits;
      exposed[static_cast<std::size_t>(cur)] += std::max(0.0, st.ready_at - t) + own;
      t = std::max(t, st.ready_at) + own;
    }
    t += (side.compute - side.tail) / (side.waits + 1);
    ++st.segments_done;
    if (st.segments_done == side.waits + 1) {
      t += side.tail;
      st.finished = true;
    } else {
      st.ready_at = t + (side.all_to_all - side.own) / side.waits;
    }
    const int other = 1 - cur;
    if (!state[static_cast<std::size_t>(other)].finished) cur = other;  // hands the rank over (or, finished, gives it)
  }
  return exposed;
}

}  // namespace

PairTiming time_overlapped_pair(const PairSide& first, const PairSide& second, PairCores cores) {
  check_side(first, "forward");
  check_side(second, "backward");
  PairTiming t;
  const auto unsplit = [](const PairSide& s) { return s.waits == 0 && s.all_to_all > 0; };
  if (unsplit(first) || unsplit(second)) {  // not split: the other side's whole compute hides it
    t.exposed_first = first.own + std::max(0.0, first.all_to_all - first.own - second.compute);
    t.exposed_second = second.own + std::max(0.0, second.all_to_all - second.own - first.compute);
  } else {
    const std::array<double, 2> exposed = baton_exposed({first, second});
    t.exposed_first = std::min(first.all_to_all, exposed[0]);
    t.exposed_second = std::min(second.all_to_all, exposed[1]);
  }
  t.hidden_first = first.all_to_all - t.exposed_first;
  t.hidden_second = second.all_to_all - t.exposed_second;
  t.shared_core = cores == PairCores::kShared ? t.hidden_first + t.hidden_second : 0.0;
  t.seconds = first.compute + second.compute + t.exposed_first + t.exposed_second + t.shared_core;
  return t;
}

}  // namespace cleave::pipeline
