#!/usr/bin/env python3
"""DualPipeV's overlapped F&B pairs against plain DualPipeV and 1F1B, measured beside the simulator's prediction
before and after its pair model took the baton's segments and shared cores (pipeline/overlap_pair_timing.hpp;
issue 36 part 6). Per shape, per round, the three variants in a rotating order (interleaved), each a `cleave train`
of benchmarks/moe/overlap_moe.json with train.trace on:

- step ms: metrics.jsonl step_ms, the median of the steps after the first 2;
- exposed all-to-all ms per step from the run's timeline: the last step's trace.json, the sum over each rank's
  compute spans of args wait_expert_all_to_all_us (the time blocked in the MoE count exchanges, dispatches and
  combines, less what an overlapped pair handed to its other side), mean over ranks; and metrics' own
  moe_ep_all_to_all_ms (the same accumulators, every steady step, median) beside it;
- the prediction: `cleave simulate --schedule S --stages pp --microbatches m --costs F,I,W --all-to-all AF,AB
  [--overlap [--all-to-all-waits NF,NB] [--shared-cores]] --json`, F, I, W the median traced compute spans of
  plain DualPipeV's (1F1B's: its own) runs less their all-to-all share, AF, AB that run's traced exposed all-to-all
  per rank and step split 3:2 over its F and I actions (3 waits per MoE block in F, 2 in I). "before": the pair
  model as it was (no waits counted, spare cores); "segments": the waits counted (3, 2 per block of the stage);
  "after": also the exchanges' own time, never hidden (plain DualPipeV's metrics, moe_ep_all_to_all_ms less
  moe_ep_all_to_all_wait_ms, per exchange, from the shape whose ranks do not outnumber the cores: see
  own_per_exchange), and --shared-cores where the shape's ranks outnumber this machine's cores ("after_spare" and
  "after_shared" both shown). --reprice FILE prices a saved run again.

  benchmarks/moe/dpv_overlap_bench.py BUILD_DIR [--rounds 5] [--steps 8] [--shapes pp2ep2,pp1ep2] [--json FILE]
                                     [--reprice FILE]

Timings are reported, not asserted (overlapped = plain bit for bit is e2e_ep_overlap_np4's).
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
# name: (pp, ranks); ep 2 from dp 2 in both
SHAPES = {"pp2ep2": (2, 4), "pp1ep2": (1, 2)}


def traced(trace):
    """Per rank: compute spans by kind (ms) and the exposed all-to-all (ms) of the traced step."""
    spans, waits = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("tid") != 0:
            continue
        spans.setdefault(e["cat"], []).append(e["dur"] / 1e3)
        waits[e["pid"]] = waits.get(e["pid"], 0.0) + e.get("args", {}).get("wait_expert_all_to_all_us", 0.0) / 1e3
    return spans, statistics.mean(waits.values())


def simulate(cleave, schedule, pp, m, costs, extra):
    f, i, w, af, ab = costs
    cmd = [cleave, "simulate", "--schedule", schedule, "--stages", str(pp), "--microbatches", str(m),
           "--costs", f"{f:.6f},{i:.6f},{w:.6f}", "--all-to-all", f"{af:.6f},{ab:.6f}", "--json"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"dpv_overlap_bench: {' '.join(cmd)} failed: {r.stderr[-2000:]}")
    out = json.loads(r.stdout)
    return {"makespan": out["makespan"], "exposed": statistics.mean(out["exposed_all_to_all"]),
            "pairs": out["overlapped_pairs"]}


def costs_of(run, actions_per_rank):
    """F, I, W less the all-to-all share, and AF, AB, per action (ms), from a variant's traces."""
    s = run["spans"]
    a2a = statistics.median(run["trace_a2a"])
    af, ab = 0.6 * a2a / actions_per_rank, 0.4 * a2a / actions_per_rank
    f = statistics.median(s["F"]) - af
    i = (statistics.median(s["I"]) if "I" in s else statistics.median(s["B"])) - ab
    w = statistics.median(s["W"]) if "W" in s else 0.0
    return max(f, 0.0), max(i, 0.0), w, af, ab


def run_shape(a, cleave, shape, cores):
    pp, ranks = SHAPES[shape]
    with open(CONFIG) as f:
        cfg = json.load(f)
    dp = ranks // pp
    m = cfg["batch"]["global_batch_size"] // (cfg["batch"]["micro_batch_size"] * dp)
    blocks = cfg["model"]["n_layers"] // (2 * pp)  # MoE blocks per DualPipeV stage
    per = {n: {"step_ms": [], "metrics_a2a": [], "trace_a2a": [], "own": [], "spans": {}, "load": []}
           for n, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name, keys in VARIANTS[r % 3:] + VARIANTS[:r % 3]:
                out = os.path.join(tmp, f"{shape}_{name}_{r}")
                sets = [f"parallel.pipeline_model_parallel_size={pp}", f"train.steps={a.steps}"] + keys
                metrics = train_metrics("dpv_overlap_bench", a.launcher, cleave, CONFIG, ranks, sets, out)
                with open(os.path.join(out, "trace.json")) as f:
                    spans, a2a = traced(json.load(f))
                steady = metrics[2:]
                p = per[name]
                p["step_ms"].append(statistics.median(x["step_ms"] for x in steady))
                p["metrics_a2a"].append(statistics.median(x.get("moe_ep_all_to_all_ms", 0.0) for x in steady))
                p["trace_a2a"].append(a2a)
                p["own"].append(statistics.median(x.get("moe_ep_all_to_all_ms", 0.0) -
                                                  x.get("moe_ep_all_to_all_wait_ms", 0.0) for x in steady))
                with open("/proc/loadavg") as f:
                    p["load"].append(float(f.read().split()[0]))  # 1-minute load at the run's end
                for kind, d in spans.items():
                    p["spans"].setdefault(kind, []).extend(d)
                print(f"{shape} round {r + 1} {name}: step {p['step_ms'][-1]:.1f} ms, traced a2a {a2a:.1f} ms",
                      file=sys.stderr, flush=True)
    return {"shape": shape, "pp": pp, "ranks": ranks, "cores": cores, "m": m, "blocks_per_stage": blocks,
            "measured": per}


def exchanges_per_step(res):
    """A rank's MoE exchanges per step under DualPipeV: 2m F and 2m I per rank, 3 and 2 per block of the stage."""
    return 2 * res["m"] * 5 * res["blocks_per_stage"]


def own_per_exchange(results):
    """The exchanges' own time (ms per exchange), from plain DualPipeV's metrics (each call's time less its wait for
    the last peer: the shortest any rank of the ep group spent in it) of a shape whose ranks do not outnumber the
    cores: with more ranks than cores that shortest call also holds the time its rank was descheduled. The same
    bytes per exchange in every shape (one model, ep 2, one micro-batch size). None without such a shape."""
    spare = [r for r in results if r["ranks"] <= r["cores"]]
    if not spare:
        return None
    r = spare[0]
    return statistics.median(r["measured"]["dualpipev"]["own"]) / exchanges_per_step(r)


def predict(cleave, res, own_exchange):
    pp, m, blocks, per = res["pp"], res["m"], res["blocks_per_stage"], res["measured"]
    c1 = costs_of(per["1f1b"], m)  # 1F1B: one stage per rank, m F and m B
    cd = costs_of(per["dualpipev"], 2 * m)  # DualPipeV: two chunks per rank
    waits = ["--all-to-all-waits", f"{3 * blocks},{2 * blocks}"]
    if own_exchange is None:  # this shape's own figure
        own_exchange = statistics.median(per["dualpipev"]["own"]) / exchanges_per_step(res)
    own_f, own_i = min(cd[3], 3 * blocks * own_exchange), min(cd[4], 2 * blocks * own_exchange)
    own = ["--all-to-all-own", f"{own_f:.6f},{own_i:.6f}"]
    shared = res["ranks"] > res["cores"]
    pred = {
        "1f1b": simulate(cleave, "1f1b", pp, m, c1, []),
        "dualpipev": simulate(cleave, "dualpipev", pp, m, cd, []),
        "overlap_before": simulate(cleave, "dualpipev", pp, m, cd, ["--overlap"]),
        "overlap_segments": simulate(cleave, "dualpipev", pp, m, cd, ["--overlap"] + waits),
        "overlap_after_spare": simulate(cleave, "dualpipev", pp, m, cd, ["--overlap"] + waits + own),
        "overlap_after_shared": simulate(cleave, "dualpipev", pp, m, cd,
                                         ["--overlap"] + waits + own + ["--shared-cores"]),
    }
    pred["overlap_after"] = pred["overlap_after_shared"] if shared else pred["overlap_after_spare"]
    res.update({"own_ms_per_exchange": own_exchange, "own_ms": (own_f, own_i), "costs_1f1b": c1,
                "costs_dualpipev": cd, "predicted": pred})


def report(res):
    per, pred = res["measured"], res["predicted"]
    pairs = [o / p for o, p in zip(per["dualpipev_overlap"]["step_ms"], per["dualpipev"]["step_ms"])]
    onef = [d / o for d, o in zip(per["dualpipev"]["step_ms"], per["1f1b"]["step_ms"])]
    med = lambda x: statistics.median(x)
    print(f"\n## {res['shape']}: pp {res['pp']}, {res['ranks']} ranks on {res['cores']} cores, m {res['m']}")
    print("| variant | step ms (median of rounds) | traced exposed a2a ms (median) | metrics a2a ms (median) |")
    print("|---|---|---|---|")
    for n, _ in VARIANTS:
        p = per[n]
        print(f"| {n} | {med(p['step_ms']):.1f} | {med(p['trace_a2a']):.1f} | {med(p['metrics_a2a']):.1f} |")
    loads = [x for n, _ in VARIANTS for x in per[n]["load"]]
    print(f"1-minute load average at the runs' ends: {min(loads):.1f}-{max(loads):.1f}")
    print(f"overlapped / plain per round: {', '.join(f'{x:.2f}' for x in pairs)}; median {med(pairs):.3f}")
    print(f"plain DualPipeV / 1F1B per round: {', '.join(f'{x:.2f}' for x in onef)}; median {med(onef):.3f}")
    dp, ov = per["dualpipev"], per["dualpipev_overlap"]
    print(f"measured exposed a2a overlapped / plain (traced): {med(ov['trace_a2a']) / med(dp['trace_a2a']):.3f}")
    base = pred["dualpipev"]
    own_step = statistics.median(per["dualpipev"]["own"])
    print(f"plain DualPipeV's exchanges' own time (metrics, median): {own_step:.1f} ms per step, "
          f"{own_step / exchanges_per_step(res) * 1e3:.0f} us per exchange; priced at "
          f"{res['own_ms_per_exchange'] * 1e3:.0f} us per exchange: {res['own_ms'][0]:.3f} ms per F, "
          f"{res['own_ms'][1]:.3f} per I")
    for k in ("overlap_before", "overlap_segments", "overlap_after_spare", "overlap_after_shared", "overlap_after"):
        q = pred[k]
        print(f"predicted {k}: makespan {q['makespan']:.1f} ms ({q['makespan'] / base['makespan']:.3f} of plain "
              f"{base['makespan']:.1f}), exposed a2a {q['exposed']:.1f} ms ({q['exposed'] / base['exposed']:.3f} of "
              f"plain {base['exposed']:.1f}), {q['pairs']} pairs")
    print(f"predicted 1f1b: makespan {pred['1f1b']['makespan']:.1f}, exposed {pred['1f1b']['exposed']:.1f}")
    print(f"costs ms (F, I, W, AF, AB): 1F1B {tuple(round(x, 3) for x in res['costs_1f1b'])}, DualPipeV "
          f"{tuple(round(x, 3) for x in res['costs_dualpipev'])}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--shapes", default="pp2ep2,pp1ep2")
    ap.add_argument("--json", default="")
    ap.add_argument("--launcher", default="mpirun --oversubscribe --allow-run-as-root")
    ap.add_argument("--reprice", default="", help="a --json FILE of an earlier run: price its measurements again")
    a = ap.parse_args()
    cleave = os.path.join(a.build, "bin", "cleave")
    cores = os.cpu_count()
    if a.reprice:
        with open(a.reprice) as f:
            results = json.load(f)
    else:
        results = [run_shape(a, cleave, s, cores) for s in a.shapes.split(",")]
    own = own_per_exchange(results)
    for res in results:
        predict(cleave, res, own)
        report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
