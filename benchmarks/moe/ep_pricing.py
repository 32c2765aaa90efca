#!/usr/bin/env python3
"""Usage: ep_pricing.py CLEAVE OUT/pass1 [OUT/pass2 ...] (ep_waits.py's finished passes; RESULTS-2026-12-01-m-ep-pricing.md).

The ep exchanges' own time against its price with and without the profile's timed row exchange (`ep_exchange`,
measure_ep_exchange): each run of each pass priced again by CLEAVE on the pass's own profile (the "after") and on the
same profile less its `ep_exchange` key (the "before": the reduce-scatter slope and point-to-point latency), at the
default imbalance and at the run's own f. From metrics.jsonl per step (steps 4+, medians): the exchanges' own time
(moe_ep_*_ms less the waits for the last peer) per kind and per call, the waits, the step. Prints a table per run and
a summary per model and layout."""
import json, os, statistics, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ep_runs import layout_sets

med = statistics.median
KINDS = ["count_exchange", "dispatch", "combine", "dispatch_grad", "combine_grad"]


def simulate(cleave, config, profile, layout, f=None):
    ranks, sets = layout_sets(layout)
    cmd = [cleave, "simulate", "--config", config, "--world", str(ranks), "--profile", profile, "--json"]
    if f:
        cmd += ["--ep-imbalance", "%.4f" % f]
    for s in sets:
        cmd += ["--set", s]
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"step": 1e3 * j["step_s"], "x": {k: 1e3 * v for k, v in j["ep_exchange_s"].items()}}


def main():
    cleave = os.path.realpath(sys.argv[1])
    runs, agg = [], {}
    for d in sys.argv[2:]:
        pas = os.path.basename(d.rstrip("/"))
        rows = json.load(open(os.path.join(d, "rows.json")))
        for r in rows:
            model, layout = r["model"], r["layout"]
            prof = os.path.join(d, "%s-np2.json" % model)
            before = prof.replace(".json", "-before.json")
            if not os.path.exists(before):
                p = json.load(open(prof))
                p["measured"].pop("ep_exchange", None)
                json.dump(p, open(before, "w"))
            config = os.path.join(os.path.dirname(os.path.abspath(d)), "..", "%s.json" % model)
            run = os.path.join(d, "run-%s-%s-%d" % (model, layout, r["round"] - 1))
            recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()][3:]
            own = {k: med([q["moe_ep_%s_ms" % k] - q["moe_ep_%s_wait_ms" % k] for q in recs]) for k in KINDS}
            wait = med([q["moe_ep_all_to_all_wait_ms"] for q in recs])
            step = med([q["step_ms"] for q in recs])
            f = r["measured"]["f_measured"]
            n = r["per_step_blocks"]
            p = {(w, at): simulate(cleave, config, prof if w == "after" else before, layout, f if at == "f" else None)
                 for w in ("before", "after") for at in ("default", "f")}
            own_m = sum(own.values())
            row = {"pass": pas, "round": r["round"], "model": model, "layout": layout, "step": step, "f": f,
                   "own": own_m, "wait": wait, "per_call_us": 1e3 * own["combine"] / n,
                   "pred": {"%s_%s" % k: v["step"] for k, v in p.items()},
                   "own_pred": {"%s_%s" % k: v["x"]["own"] * n for k, v in p.items()},
                   "wait_pred": {"%s_%s" % k: v["x"]["wait"] * n for k, v in p.items()},
                   "a2a_pred_us": {w: 1e3 * p[(w, "f")]["x"]["all_to_all"] / 4 for w in ("before", "after")},
                   "fit": json.load(open(prof))["measured"].get("ep_exchange")}
            runs.append(row)
            agg.setdefault((model, layout), []).append(row)
    json.dump(runs, open(os.path.join(sys.argv[2], "..", "pricing.json"), "w"), indent=1)
    print("| pass | round | model | layout | measured step ms | f run | meas / pred, default f: before / after | at the run's f: before / after | exchanges' own ms: meas / before / after (run's f) | one combine's own us: meas / priced at the run's f before / after | waits ms: meas / priced at the run's f |")
    print("|" + "---|" * 11)
    for x in runs:
        P, O, W = x["pred"], x["own_pred"], x["wait_pred"]
        print("| %s | %d | %s | %s | %.1f | %.3f | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f / %.1f | %.0f / %.0f / %.0f | %.1f / %.1f |" % (
            x["pass"], x["round"], x["model"], x["layout"], x["step"], x["f"], x["step"] / P["before_default"],
            x["step"] / P["after_default"], x["step"] / P["before_f"], x["step"] / P["after_f"], x["own"],
            O["before_f"], O["after_f"], x["per_call_us"], x["a2a_pred_us"]["before"], x["a2a_pred_us"]["after"],
            x["wait"], W["after_f"]))
    print()
    print("| model | layout | runs | meas / pred, default f: before | after | at the run's f: before | after | own: meas / priced before | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    rng = lambda v: "%.2f-%.2f (median %.2f)" % (min(v), max(v), med(v))
    for (model, layout), xs in agg.items():
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
            model, layout, len(xs), rng([x["step"] / x["pred"]["before_default"] for x in xs]),
            rng([x["step"] / x["pred"]["after_default"] for x in xs]), rng([x["step"] / x["pred"]["before_f"] for x in xs]),
            rng([x["step"] / x["pred"]["after_f"] for x in xs]), rng([x["own"] / x["own_pred"]["before_f"] for x in xs]),
            rng([x["own"] / x["own_pred"]["after_f"] for x in xs])))


if __name__ == "__main__":
    main()
