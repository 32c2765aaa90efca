#!/usr/bin/env python3
"""Where an expert-parallel step's time goes, measured beside the planner's terms (RESULTS-2026-11-30-e-ep-waits.md).

Per model: `cleave profile` at np RANKS (tp 1, the config's micro-batch), then ROUNDS interleaved rounds of every
layout (`cleave train` with train.trace=true, each under `flock LOCK` when given); each run reports the median step
after the first 3, the trainer's ep exchange split (metrics.jsonl `moe_ep_<kind>_ms` / `_wait_ms`, per step, medians
over steps 3+), the busiest ep rank's received rows over the mean (from `moe_ep_rows_b<block>_s<src>_d<dst>`, per
step, the largest block), and its last step's timeline (train.trace: rank 0's F and B spans, their ep waits,
REDUCE_GRAD, OPTIMIZER_STEP); beside `cleave simulate --config --json` of the same layout on the profile (step_s,
its breakdown and `ep_exchange_s` per block and micro-batch). Prints one JSON object per run and a table.

Usage: ep_waits.py CLEAVE OUTDIR --model NAME=CONFIG[@ep4,...] [--model ...] [--layouts dp2,ep2 ("" none)]
                   [--rounds 3] [--steps 12] [--lock /work/build.lock] [--profile NAME=FILE] [--before BIN]
       ep_waits.py --table OUTDIR/rows.json   (the markdown table of a finished run)
       ep_waits.py --reprice OUTDIR CLEAVE NAME=CONFIG...   (a finished run priced again by another build: its own
                   predictions the "before", CLEAVE's the "after"; OUTDIR/rows-repriced.json and the table)
--before BIN prices every run with a second binary too (an older build, on the same profile: the "before").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from ep_runs import ENV, launcher, layout_sets, rows_per_destination

KINDS = ["count_exchange", "dispatch", "combine", "dispatch_grad", "combine_grad"]


def locked(lock, cmd):
    return (["flock", lock] if lock else []) + cmd


def predict(cleave, config, profile, layout, imbalance=None):
    ranks, sets = layout_sets(layout)
    cmd = [cleave, "simulate", "--config", config, "--world", str(ranks), "--profile", profile, "--json"]
    if imbalance:
        cmd += ["--ep-imbalance", "%.4f" % imbalance]
    for s in sets:
        cmd += ["--set", s]
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"step_ms": 1e3 * j["step_s"], "terms_ms": {k: 1e3 * v for k, v in j["breakdown_s"].items()
                                                        if isinstance(v, (int, float))},
            "ep_exchange_ms": {k: 1e3 * v for k, v in (j.get("ep_exchange_s") or {}).items()},
            "ep_imbalance": j.get("ep_imbalance")}


def busiest_over_mean(record):
    """1 + the mean over blocks of the busiest destination's received rows over the mean, less 1 (one step): the
    imbalance whose waits the step adds up, block by block."""
    rows = rows_per_destination(record)
    if not rows:
        return None
    return 1 + statistics.mean(max(d.values()) / statistics.mean(d.values()) - 1 for d in rows.values())


def trace_spans(path):
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    out = {"F": 0.0, "B": 0.0, "I": 0.0, "W": 0.0, "REDUCE_GRAD": 0.0, "OPTIMIZER_STEP": 0.0, "ep_wait": 0.0}
    for e in ev:
        if e.get("ph") != "X" or e.get("pid") != 0 or e.get("tid") != 0:
            continue
        cat = e.get("cat")
        if cat in out:
            out[cat] += e["dur"] / 1e3
        out["ep_wait"] += e.get("args", {}).get("wait_expert_all_to_all_us", 0.0) / 1e3
    return out


def train(cleave, config, layout, steps, run, lock):
    ranks, sets = layout_sets(layout)
    cmd = launcher(ranks) + [cleave, "train", config, "--set", "train.steps=%d" % steps, "--set",
                             "train.out_dir=" + run, "--set", "train.trace=true"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(locked(lock, cmd), check=True, env=ENV, stdin=subprocess.DEVNULL, capture_output=True)
    recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()][3:]
    med = lambda k: statistics.median([r.get(k, 0.0) for r in recs])
    out = {"step_ms": med("step_ms"), "ep_ms": {}, "peak_bytes": max(r.get("peak_bytes", 0) for r in recs)}
    for k in KINDS:
        total, wait = med("moe_ep_%s_ms" % k), med("moe_ep_%s_wait_ms" % k)
        out["ep_ms"][k] = {"own": total - wait, "wait": wait}
    f = [busiest_over_mean(r) for r in recs]
    out["f_measured"] = statistics.median(f) if f[0] is not None else None
    out["trace"] = trace_spans(os.path.join(run, "trace.json"))
    return out


def table(rows):
    """One markdown row per run: the step, before / after / after at the run's own imbalance, and the ep split."""
    print("| round | model | layout | measured ms | before: predicted (meas / pred) | after: predicted (meas / pred) | "
          "after at the run's f: predicted (meas / pred) | f: run / priced | ep own ms: meas / before / after | "
          "ep waits ms: meas / after / after at f | traced F+B less ep waits / predicted F+I+W ms |")
    print("|" + "---|" * 11)
    for r in rows:
        m, p = r["measured"], r["predicted"]
        n = r["per_step_blocks"]
        cell = lambda q: "%.1f (%.2f)" % (q["step_ms"], m["step_ms"] / q["step_ms"]) if q else "-"
        ex = lambda q, k: "%.2f" % (q["ep_exchange_ms"].get(k, 0) * n) if q else "-"
        own = sum(v["own"] for v in m["ep_ms"].values())
        wait = sum(v["wait"] for v in m["ep_ms"].values())
        t = p["terms_ms"]
        f = m["f_measured"]
        at_f = r.get("predicted_at_measured_f")
        b = r.get("predicted_before")
        print("| %d | %s | %s | %.1f | %s | %s | %s | %s | %.2f / %s / %s | %.2f / %s / %s | %.1f / %.1f |" % (
            r["round"], r["model"], r["layout"], m["step_ms"], cell(b), cell(p), cell(at_f),
            "%.3f / %.3f" % (f, p["ep_imbalance"]) if f else "-", own, ex(b, "own"), ex(p, "own"), wait, ex(p, "wait"),
            ex(at_f, "wait"), m["trace"]["F"] + m["trace"]["B"] - m["trace"]["ep_wait"],
            t["forward"] + t["input_grad"] + t["weight_grad"]))


def reprice(out, cleave, models, profile_ranks=2):
    """The rows of a finished run priced again by CLEAVE on the run's own profiles: its predictions become the
    "before" (the binary that ran it), CLEAVE's the "after"; writes OUT/rows-repriced.json."""
    rows = json.load(open(os.path.join(out, "rows.json")))
    for r in rows:
        config = models[r["model"]]
        prof = os.path.join(out, "%s-np%d.json" % (r["model"], profile_ranks))
        r["predicted_before"] = r["predicted"]
        r["predicted"] = predict(os.path.realpath(cleave), config, prof, r["layout"])
        if r["measured"]["f_measured"]:
            r["predicted_at_measured_f"] = predict(os.path.realpath(cleave), config, prof, r["layout"],
                                                   r["measured"]["f_measured"])
    json.dump(rows, open(os.path.join(out, "rows-repriced.json"), "w"), indent=1)
    table(rows)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        table(json.load(open(sys.argv[2])))
        return
    if len(sys.argv) >= 5 and sys.argv[1] == "--reprice":  # --reprice OUT CLEAVE NAME=CONFIG...
        reprice(sys.argv[2], sys.argv[3], dict(m.split("=", 1) for m in sys.argv[4:]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("out")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--profile", action="append", default=[])
    ap.add_argument("--layouts", default="dp2,ep2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--profile-ranks", type=int, default=2)
    ap.add_argument("--lock", default="")
    ap.add_argument("--before", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cleave = os.path.realpath(a.cleave)
    models, extra = {}, {}
    for m in a.model:  # NAME=CONFIG or NAME=CONFIG@layout,layout (layouts added for this model only)
        name, rest = m.split("=", 1)
        models[name], _, more = rest.partition("@")
        extra[name] = more.split(",") if more else []
    profiles = dict(p.split("=", 1) for p in a.profile)
    layouts = [l for l in a.layouts.split(",") if l]  # "" for none: each model's own @layouts only
    for name, config in models.items():
        if name in profiles:
            continue
        micro = json.load(open(config))["batch"]["micro_batch_size"]
        prof = os.path.join(a.out, "%s-np%d.json" % (name, a.profile_ranks))
        cmd = launcher(a.profile_ranks) + [cleave, "profile", config, "--out", prof, "--world",
                                           str(a.profile_ranks), "--tp", "1", "--micro-batches", str(micro),
                                           "--rounds", "3", "--set",
                                           "parallel.data_parallel_size=%d" % a.profile_ranks]
        log = subprocess.run(locked(a.lock, cmd), env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if log.returncode:
            sys.exit(log.stdout + log.stderr)
        open(prof + ".log", "w").write(log.stdout + log.stderr)
        profiles[name] = prof
    rows = []
    for rnd in range(a.rounds):
        for name, config in models.items():
            for layout in layouts + extra[name]:
                run = os.path.join(a.out, "run-%s-%s-%d" % (name, layout, rnd))
                row = {"round": rnd + 1, "model": name, "layout": layout,
                       "predicted": predict(cleave, config, profiles[name], layout),
                       "measured": train(cleave, config, layout, a.steps, run, a.lock)}
                ranks = int(layout[2:])
                batch = json.load(open(config))["batch"]
                model = json.load(open(config))["model"]
                row["per_step_blocks"] = model["n_layers"] * batch["global_batch_size"] // ranks // batch["micro_batch_size"]
                if a.before:
                    row["predicted_before"] = predict(os.path.realpath(a.before), config, profiles[name], layout)
                if row["measured"]["f_measured"]:  # the same plan priced at the run's own routing imbalance
                    row["predicted_at_measured_f"] = predict(cleave, config, profiles[name], layout,
                                                             row["measured"]["f_measured"])
                print(json.dumps(row), flush=True)
                rows.append(row)
    json.dump(rows, open(os.path.join(a.out, "rows.json"), "w"), indent=1)
    table(rows)


if __name__ == "__main__":
    main()
