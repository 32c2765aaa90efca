#!/usr/bin/env python3
"""DualPipeV's overlapped F&B pairs at pp 2 x ep 2 (issue 36 part 6): 1F1B, plain DualPipeV and DualPipeV with
parallel.moe_a2a_overlap, trained on 4 ranks (mpirun; ep 2 taken from dp 2) in interleaved rounds (the order
rotates each round), with the measured step time (metrics.jsonl step_ms), the exposed all-to-all time
(moe_ep_all_to_all_ms: a rank's wall time inside the MoE count exchanges, dispatches and combines, minus the
time it ran the paired micro-batch while one was in flight; mean over ranks) and the pipeline part of the last
step from its measured timeline (train.trace's trace.json: first action start to last action end, per rank),
beside the simulator's prediction of both (`cleave simulate --schedule S --costs F,I,W --all-to-all AF,AB
[--overlap] --json`, with F, I, W the measured mean compute spans of the schedule's own run (plain DualPipeV's
for the overlapped prediction) less their all-to-all share, and AF, AB that run's exposed all-to-all per step
split over its forwards and backwards 3:2, their count of all-to-all waits: count exchange, dispatch, combine in
F; dispatch, combine in I).

  benchmarks/moe/overlap_bench.py BUILD_DIR [--rounds 3] [--steps 8] [--markdown]
                                  [--launcher "mpirun --oversubscribe --allow-run-as-root"]
Timings are reported, not asserted (the bit-for-bit equality is e2e_ep_overlap_np4's).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from train_run import train_metrics

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "overlap_moe.json")
VARIANTS = [
    ("1f1b", ["parallel.schedule=1f1b"]),
    ("dualpipev", ["parallel.schedule=dualpipev"]),
    ("dualpipev_overlap", ["parallel.schedule=dualpipev", "parallel.moe_a2a_overlap=true"]),
]


def run_train(launcher, cleave, keys, steps, out_dir):
    metrics = train_metrics("overlap_bench", launcher, cleave, CONFIG, 4, [f"train.steps={steps}"] + keys, out_dir)
    with open(os.path.join(out_dir, "trace.json")) as f:
        trace = json.load(f)
    return metrics, trace


def timeline(trace):
    """Per pp rank (pid): compute spans by kind (ms) and the pipeline span (first start to last end, ms)."""
    spans, makespan = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("tid") != 0:
            continue
        kind = e["cat"]
        spans.setdefault(e["pid"], {}).setdefault(kind, []).append(e["dur"] / 1e3)
        lo, hi = makespan.get(e["pid"], (float("inf"), 0.0))
        makespan[e["pid"]] = (min(lo, e["ts"] / 1e3), max(hi, (e["ts"] + e["dur"]) / 1e3))
    return spans, {pid: hi - lo for pid, (lo, hi) in makespan.items()}


def simulate(cleave, schedule, m, f, i, w, af, ab, overlap):
    cmd = [cleave, "simulate", "--schedule", schedule, "--stages", "2", "--microbatches", str(m),
           "--costs", f"{f:.6f},{i:.6f},{w:.6f}", "--all-to-all", f"{af:.6f},{ab:.6f}", "--json"]
    if overlap:
        cmd.append("--overlap")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"overlap_bench: {' '.join(cmd)} failed: {r.stderr[-2000:]}")
    out = json.loads(r.stdout)
    return out["makespan"], statistics.mean(out["exposed_all_to_all"]), out["overlapped_pairs"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--launcher", default="mpirun --oversubscribe --allow-run-as-root")
    a = ap.parse_args()
    cleave = os.path.join(a.build, "bin", "cleave")
    with open(CONFIG) as f:
        cfg = json.load(f)
    m = cfg["batch"]["global_batch_size"] // (cfg["batch"]["micro_batch_size"] * 2)  # dp 2 at 4 ranks, pp 2
    per = {name: {"step_ms": [], "a2a_ms": [], "trace_ms": [], "spans": {}, "a2a_last": []} for name, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
            for name, keys in order:
                out = os.path.join(tmp, f"{name}_{r}")
                metrics, trace = run_train(a.launcher, cleave, keys, a.steps, out)
                steady = metrics[2:]  # steps 3.. (the first allocate and warm the caches)
                per[name]["step_ms"] += [x["step_ms"] for x in steady]
                per[name]["a2a_ms"] += [x.get("moe_ep_all_to_all_ms", 0.0) for x in steady]
                per[name]["a2a_last"].append(metrics[-1].get("moe_ep_all_to_all_ms", 0.0))
                spans, makespan = timeline(trace)
                per[name]["trace_ms"].append(statistics.mean(makespan.values()))
                for pid, kinds in spans.items():
                    for kind, durs in kinds.items():
                        per[name]["spans"].setdefault(kind, []).extend(durs)

    def costs(name, f_count, i_count):
        s = per[name]["spans"]
        a2a = statistics.median(per[name]["a2a_last"])  # the traced (last) step's exposed all-to-all, ms per rank
        af, ab = 0.6 * a2a / f_count, 0.4 * a2a / i_count
        f = statistics.median(s["F"]) - af
        i = statistics.median(s["I"]) - ab if "I" in s else statistics.median(s["B"]) - ab
        w = statistics.median(s["W"]) if "W" in s else 0.0
        return max(f, 0.0), max(i, 0.0), w, af, ab

    rows = []
    c1 = costs("1f1b", m, m)  # 1F1B at pp 2: one stage per rank (2 MoE blocks), m F and m B per rank
    if "W" not in per["1f1b"]["spans"]:  # fused B: the simulator's B = I + W; give it all as I
        c1 = (c1[0], c1[1], 0.0, c1[3], c1[4])
    cd = costs("dualpipev", 2 * m, 2 * m)  # two chunks per rank (1 MoE block each)
    predictions = {
        "1f1b": simulate(cleave, "1f1b", m, *c1, overlap=False),
        "dualpipev": simulate(cleave, "dualpipev", m, *cd, overlap=False),
        "dualpipev_overlap": simulate(cleave, "dualpipev", m, *cd, overlap=True),
    }
    base = statistics.median(per["1f1b"]["step_ms"])
    for name, _ in VARIANTS:
        p = per[name]
        sim_makespan, sim_exposed, pairs = predictions[name]
        rows.append((name, statistics.median(p["step_ms"]), statistics.median(p["step_ms"]) / base,
                     statistics.median(p["a2a_ms"]), statistics.median(p["trace_ms"]), sim_makespan, sim_exposed,
                     pairs))
    print(f"m = {m} micro-batches per step, {a.rounds} interleaved rounds x {a.steps - 2} steady steps per variant")
    print(f"simulator costs (ms): 1F1B F,I,W {c1[0]:.3f},{c1[1]:.3f},{c1[2]:.3f} a2a {c1[3]:.3f},{c1[4]:.3f}; "
          f"DualPipeV F,I,W {cd[0]:.3f},{cd[1]:.3f},{cd[2]:.3f} a2a {cd[3]:.3f},{cd[4]:.3f}")
    if a.markdown:
        print("| schedule | step ms (median) | vs 1F1B | exposed all-to-all ms/step (median) | last step's pipeline span "
              "from trace.json, ms | simulated makespan ms | simulated exposed all-to-all ms/rank | pairs (sim) |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]:.1f} | {r[2]:.2f} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.1f} | {r[6]:.1f} | {r[7]} |")
    else:
        for r in rows:
            print(r)


if __name__ == "__main__":
    main()
