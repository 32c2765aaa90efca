// Threads per rank: the CPU kernels' OpenMP team and OpenBLAS pool are sized so that all ranks on a node
// together use its cores once (cores available to the process / ranks on the node, at least 1).
// Oversubscribed threads are catastrophic on few cores: a spinning or descheduled sibling turns every
// parallel region into a wait (measured 10-35x slower steps with 4 ranks x 2 threads on 2 cores).
#pragma once

namespace cleave::train {

// Applies the rule above (ranks on the node from the launcher's environment; CLEAVE_THREADS overrides)
// and returns the thread count chosen. Call once per process, before training.
int configure_threads_for_node();

}  // namespace cleave::train
