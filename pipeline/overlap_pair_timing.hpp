// The simulator's timing of one overlapped F&B pair (pipeline/simulator.hpp, pipeline/overlap_pair.hpp): the
// executor's baton played out on costs. Each side is its compute cut by its all-to-all waits into equal segments
// (n waits: n + 1 segments of (compute - tail) / (n + 1), the tail (a B's W) added to the last; each wait
// all-to-all / n, posted at the end of the segment before it). Of each wait, the exchange's own time (own / n: the
// rank's own work inside the call, posting and, over shared memory, copying the bytes, which move only while the
// rank runs) is paid by the side itself when it takes the rank back and never hides; only the rest, the wait for the
// last peer, flies after the post. The forward runs first; at each wait the running side hands the rank to the other
// side, which runs its next segment and then hands back at its own wait (or at its end); a side taking the rank back
// first waits for what is left of its posted exchange (exposed), then runs on. Once one side has finished the other
// runs alone, waiting out each exchange in full. Hidden = a side's all-to-all less what it exposed.
//
// Where the pair's cores are shared (PairCores::kShared: more ranks than cores on the node, so a waiting rank's core
// runs another rank) the hand-over still happens (the exposed figure is the executor's: its wait less the time it
// handed off) but the hidden seconds buy no step time: the other side's compute during the wait takes the core
// time that the wait gave a co-runner, which every rank takes back from it the same way, so the pair lasts
// F + its all-to-all + B + its all-to-all, as unpaired.
//
// Invariant: exposed + hidden = the side's all-to-all, each >= 0, exposed >= own; `seconds` (what the pair holds the rank) =
// both sides' compute + both exposed (kSpare), + both hidden too (kShared).
#pragma once

namespace cleave::pipeline {

// Who pays for the time an overlapped pair's all-to-all is hidden (SimulationCosts::pair_cores).
enum class PairCores {
  kSpare,   // a waiting rank's core would idle (a core per rank, or links that move the bytes beside compute)
  kShared,  // more ranks than cores: a waiting rank's core runs another rank, so hiding buys no step time
};

struct PairSide {
  double compute = 0;     // the side's compute (F; I or I + W), without its all-to-alls
  double tail = 0;        // of it, what runs after its last segment's end, with no wait in it (a B's W)
  double all_to_all = 0;  // the all-to-all time an unpaired run of it waits
  double own = 0;         // of it, the exchange's own time (see the header): at most all_to_all
  // Its all-to-all waits (0 with an all-to-all: not split, the other side's whole compute hides it,
  // own + max(0, a - own - c)).
  int waits = 0;
};

struct PairTiming {
  double exposed_first = 0, exposed_second = 0;  // what each side still waits (the executor's figure)
  double hidden_first = 0, hidden_second = 0;    // the rest of each side's all-to-all
  double seconds = 0;                            // the rank's time in the pair (see the header)
  // The hidden seconds the step still pays (kShared: all of them; kSpare: none).
  double shared_core = 0;
};

// Throws Error for a negative or non-finite cost or a negative wait count.
PairTiming time_overlapped_pair(const PairSide& first, const PairSide& second, PairCores cores);

}  // namespace cleave::pipeline
