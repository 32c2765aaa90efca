#!/usr/bin/env python3
"""tp and cp layouts on more ranks than cores, measured beside the planner (RESULTS-2026-12-01-b-tp-cp-cores.md).

Per model: `cleave profile` under `mpiexec -n 2` (--world 4: tp widths 1 and 2, the profile's time_sharing at 2 ranks
on one core), then ROUNDS interleaved rounds of every layout (`cleave train` with train.trace=true, under `flock LOCK`
when given): the median step_ms after the first 3 steps and rank 0's last-step spans (F, B, and the time inside them
blocked on tp and cp collectives, trace args wait_tp_us / wait_cp_us); beside `cleave simulate --config --json` of the
same layout on the profile by each binary given (the first is the one that ran; --price BIN adds more).

Layouts: the names in LAYOUTS (tp2, cp2-ring, cp2-a2a, tp2dp2, cp2dp2-ring, cp2dp2-a2a, tp2cp2 by default;
pp2ep2-dpv and pp2ep2-dpv-overlap for a moe model: DualPipeV at pp2 x dp2 with ep2, without and with
parallel.moe_a2a_overlap).
Usage: tp_cp_cores.py CLEAVE OUTDIR --model NAME=CONFIG[@layout,...] [--model ...] [--rounds 3] [--steps 12]
                      [--lock FILE]
                      [--price LABEL=BIN ...] [--layouts tp2dp2,...]
       tp_cp_cores.py --reprice OUTDIR LABEL=BIN NAME=CONFIG...   (a finished run priced by another build)
       tp_cp_cores.py --table OUTDIR/rows.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1")
LAYOUTS = {  # name: (tp, cp, dp, comm, pp, ep, more --set lines)
    "tp2": (2, 1, 1, "ring", 1, 1, []), "cp2-ring": (1, 2, 1, "ring", 1, 1, []),
    "cp2-a2a": (1, 2, 1, "all_to_all", 1, 1, []), "tp2dp2": (2, 1, 2, "ring", 1, 1, []),
    "cp2dp2-ring": (1, 2, 2, "ring", 1, 1, []), "cp2dp2-a2a": (1, 2, 2, "all_to_all", 1, 1, []),
    "tp2cp2": (2, 2, 1, "ring", 1, 1, []),
    # DualPipeV at pp2 x dp2, ep2 taken from dp: without and with the overlapped F&B pairs (a moe model)
    "pp2ep2-dpv": (1, 1, 2, "ring", 2, 2, ["parallel.schedule=dualpipev"]),
    "pp2ep2-dpv-overlap": (1, 1, 2, "ring", 2, 2, ["parallel.schedule=dualpipev", "parallel.moe_a2a_overlap=true"]),
}
DEFAULT_LAYOUTS = "tp2,cp2-ring,cp2-a2a,tp2dp2,cp2dp2-ring,cp2dp2-a2a,tp2cp2"


def layout_sets(name):
    tp, cp, dp, comm, pp, ep, more = LAYOUTS[name]
    sets = ["parallel.tensor_model_parallel_size=%d" % tp, "parallel.context_parallel_size=%d" % cp,
            "parallel.data_parallel_size=%d" % dp, "parallel.pipeline_model_parallel_size=%d" % pp]
    if cp > 1:
        sets.append("parallel.context_parallel_comm=" + comm)
    if ep > 1:
        sets.append("parallel.expert_model_parallel_size=%d" % ep)
    return tp * cp * dp * pp, sets + more


def launcher(ranks):
    over = ["--oversubscribe"] if ranks > os.cpu_count() else []
    return ["mpiexec", "-n", str(ranks)] + over + ["--mca", "btl", "self,vader"]


def locked(lock, cmd):
    return (["flock", lock] if lock else []) + cmd


def predict(cleave, config, profile, layout):
    ranks, sets = layout_sets(layout)
    cmd = [cleave, "simulate", "--config", config, "--world", str(ranks), "--profile", profile, "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out[out.index("{"):])
    return {"step_ms": 1e3 * j["step_s"],
            "terms_ms": {k: 1e3 * v for k, v in j["breakdown_s"].items() if isinstance(v, (int, float))}}


def trace_spans(path):
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    out = {"F": 0.0, "B": 0.0, "I": 0.0, "W": 0.0, "REDUCE_GRAD": 0.0, "OPTIMIZER_STEP": 0.0, "tp_wait": 0.0,
           "cp_wait": 0.0}
    for e in ev:
        if e.get("ph") != "X" or e.get("pid") != 0 or e.get("tid") != 0:
            continue
        if e.get("cat") in out:
            out[e["cat"]] += e["dur"] / 1e3
        args = e.get("args", {})
        out["tp_wait"] += args.get("wait_tp_us", 0.0) / 1e3
        out["cp_wait"] += args.get("wait_cp_us", 0.0) / 1e3
    return out


def train(cleave, config, layout, steps, run, lock):
    ranks, sets = layout_sets(layout)
    cmd = launcher(ranks) + [cleave, "train", config, "--set", "train.steps=%d" % steps, "--set",
                             "train.out_dir=" + run, "--set", "train.trace=true"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(locked(lock, cmd), env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), r.stdout[-3000:], r.stderr[-3000:]))
    recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()][3:]
    steps_ms = [r["step_ms"] for r in recs if "step_ms" in r]
    return {"step_ms": statistics.median(steps_ms), "steps_ms": steps_ms,
            "trace": trace_spans(os.path.join(run, "trace.json"))}


def table(rows, labels):
    print("| round | model | layout | ranks | measured ms | " + " | ".join(
        "%s: predicted (meas / pred)" % l for l in labels) + " | tp + cp terms ms " + " / ".join(labels) +
        " | traced F+B / tp wait / cp wait ms (rank 0) |")
    print("|" + "---|" * (7 + len(labels)))
    for r in rows:
        m = r["measured"]
        cells = []
        comm = []
        for l in labels:
            p = r["predicted"].get(l)
            cells.append("%.1f (%.2f)" % (p["step_ms"], m["step_ms"] / p["step_ms"]) if p else "-")
            t = p["terms_ms"] if p else {}
            comm.append("%.1f" % (t.get("tensor_parallel", 0) + t.get("context_parallel", 0)) if p else "-")
        tr = m["trace"]
        print("| %d | %s | %s | %d | %.1f | %s | %s | %.1f / %.1f / %.1f |" % (
            r["round"], r["model"], r["layout"], layout_sets(r["layout"])[0], m["step_ms"], " | ".join(cells),
            " / ".join(comm), tr["F"] + tr["B"], tr["tp_wait"], tr["cp_wait"]))


def reprice(out, label, cleave, models):
    rows = json.load(open(os.path.join(out, "rows.json")))
    for r in rows:
        prof = os.path.join(out, "%s-profile.json" % r["model"])
        r["predicted"][label] = predict(os.path.realpath(cleave), models[r["model"]], prof, r["layout"])
    json.dump(rows, open(os.path.join(out, "rows.json"), "w"), indent=1)
    table(rows, list(rows[0]["predicted"]))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        rows = json.load(open(sys.argv[2]))
        table(rows, list(rows[0]["predicted"]))
        return
    if len(sys.argv) >= 5 and sys.argv[1] == "--reprice":
        label, binary = sys.argv[3].split("=", 1)
        reprice(sys.argv[2], label, binary, dict(m.split("=", 1) for m in sys.argv[4:]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("out")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--layouts", default=DEFAULT_LAYOUTS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lock", default="")
    ap.add_argument("--price", action="append", default=[])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cleave = os.path.realpath(a.cleave)
    binaries = {"run": cleave}
    binaries.update(dict(p.split("=", 1) for p in a.price))
    models, model_layouts = {}, {}
    for m in a.model:  # NAME=CONFIG or NAME=CONFIG@layout,layout (that model's layouts instead of --layouts)
        name, rest = m.split("=", 1)
        models[name], _, own = rest.partition("@")
        model_layouts[name] = (own or a.layouts).split(",")
    for name, config in models.items():
        micro = json.load(open(config))["batch"]["micro_batch_size"]
        prof = os.path.join(a.out, "%s-profile.json" % name)
        widths = "1,2" if any(LAYOUTS[l][0] > 1 for l in model_layouts[name]) else "1"
        cmd = launcher(2) + [cleave, "profile", config, "--out", prof, "--world", "4", "--tp", widths,
                             "--micro-batches", str(micro), "--rounds", "3"]
        log = subprocess.run(locked(a.lock, cmd), env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if log.returncode:
            sys.exit(log.stdout + log.stderr)
        open(prof + ".log", "w").write(log.stdout + log.stderr)
    rows = []
    for rnd in range(a.rounds):
        for name, config in models.items():
            prof = os.path.join(a.out, "%s-profile.json" % name)
            for layout in model_layouts[name]:
                run = os.path.join(a.out, "run-%s-%s-%d" % (name, layout, rnd))
                row = {"round": rnd + 1, "model": name, "layout": layout,
                       "predicted": {l: predict(os.path.realpath(b), config, prof, layout)
                                     for l, b in binaries.items()},
                       "measured": train(cleave, config, layout, a.steps, run, a.lock),
                       "load": open("/proc/loadavg").read().split()[:3]}
                print(json.dumps({k: row[k] for k in ("round", "model", "layout")}), "%.1f ms" % row["measured"]["step_ms"],
                      " ".join("%s %.1f" % (l, p["step_ms"]) for l, p in row["predicted"].items()), flush=True)
                rows.append(row)
    json.dump(rows, open(os.path.join(a.out, "rows.json"), "w"), indent=1)
    table(rows, list(binaries))


if __name__ == "__main__":
    main()
