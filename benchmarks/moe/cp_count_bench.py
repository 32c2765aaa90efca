#!/usr/bin/env python3
"""Two builds of cleave on one MoE step at cp 2 x pp 2 under DualPipeV (4 ranks, mpirun): the step time of a
baseline binary against a candidate's, in interleaved rounds (the order alternating each round), so a change to
what a MoE block does under context parallelism (the load-balancing loss's count exchange: non-blocking since
2026-11-29, layers/moe/balance_exchange.hpp) is read as a ratio on a shared machine.

  benchmarks/moe/cp_count_bench.py BASE_CLEAVE NEW_CLEAVE [--rounds 5] [--steps 8] [--skip 2]
                                   [--launcher "mpirun --oversubscribe --allow-run-as-root"] [--set KEY=VALUE ...]

Per run: the median of metrics.jsonl step_ms over steps skip+1..steps (rank 0's log). Per round: new / base.
Printed: each binary's median over rounds of its run medians, and the median of the per-round ratios. Timings
are reported, not asserted (the equality of the two builds' results is e2e_moe_equivalence's).
"""
import argparse
import os
import statistics
import sys
import tempfile

from train_run import train_metrics

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "overlap_moe.json")
LAYOUT = ["parallel.expert_model_parallel_size=1", "parallel.context_parallel_size=2",
          "parallel.pipeline_model_parallel_size=2", "parallel.schedule=dualpipev", "train.trace=false"]


def run_step_ms(launcher, cleave, keys, steps, skip):
    with tempfile.TemporaryDirectory() as out_dir:
        metrics = train_metrics("cp_count_bench", launcher, cleave, CONFIG, 4, [f"train.steps={steps}"] + LAYOUT + keys,
                                out_dir)
    times = [m["step_ms"] for m in metrics if "step_ms" in m][skip:]
    if not times:
        sys.exit(f"cp_count_bench: no step_ms after step {skip} in {cleave}'s metrics")
    return statistics.median(times), metrics[-1].get("loss")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--launcher", default="mpirun --oversubscribe --allow-run-as-root")
    ap.add_argument("--set", action="append", default=[], dest="keys")
    a = ap.parse_args()
    runs = {"base": [], "new": []}
    ratios = []
    for r in range(a.rounds):
        order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
        got = {}
        for name in order:
            got[name] = run_step_ms(a.launcher, getattr(a, name), a.keys, a.steps, a.skip)
            runs[name].append(got[name][0])
        if got["base"][1] != got["new"][1]:
            print(f"round {r}: the last logged loss differs: base {got['base'][1]} new {got['new'][1]}")
        ratios.append(got["new"][0] / got["base"][0])
        print(f"round {r} ({order[0]} first): base {got['base'][0]:.1f} ms, new {got['new'][0]:.1f} ms, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"median step ms: base {statistics.median(runs['base']):.1f}, new {statistics.median(runs['new']):.1f}; "
          f"median per-round ratio new / base {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {a.rounds} rounds)")


if __name__ == "__main__":
    main()
