#!/usr/bin/env python3
"""Usage: ep_terms.py OUT/pass1/rows.json [OUT/pass2/rows.json ...] (ep_waits.py's finished passes, ep2 runs).

Per ep2 run of ep_waits.py passes (RESULTS-2026-12-01-c-ep-measured.md): measured against predicted by term, from metrics.jsonl per step (steps 4+):
the step less the ep exchanges (compute, gradient reduce, optimizer: the trace of the last step puts all but
0.2-0.5 ms of it in F, B, REDUCE_GRAD, OPTIMIZER_STEP), the exchanges' own time and their waits for the last peer;
priced: step_s less expert_all_to_all and count_exchange, and ep_exchange_s's own and wait (per block and micro-batch,
times the blocks a step). Then per pass the profile's sync_wait_per_compute, the waits priced at the default and at
the run's own routing imbalance f (split: the busiest rank's extra expert compute, `imbalance_wait`, and the profile's
peer wait), and measured over predicted at both."""
import json, os, statistics, sys
med = statistics.median
rows_out, agg = [], {}
for path in sys.argv[1:]:
    pas = os.path.basename(os.path.dirname(path))
    for r in json.load(open(path)):
        run = os.path.join(os.path.dirname(path), "run-%s-%s-%d" % (r["model"], r["layout"], r["round"] - 1))
        recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()][3:]
        steps = [q["step_ms"] for q in recs]
        exch = [q["moe_ep_all_to_all_ms"] for q in recs]; wait = [q["moe_ep_all_to_all_wait_ms"] for q in recs]
        non = med([s - e for s, e in zip(steps, exch)])
        own_m, wait_m, M = med([e - w for e, w in zip(exch, wait)]), med(wait), med(steps)
        p = r["predicted"]; t = p["terms_ms"]; n = r["per_step_blocks"]; x = p["ep_exchange_ms"]
        exch_p = t["expert_all_to_all"] + t["count_exchange"]
        wait_p = x.get("wait", 0) * n
        own_p = exch_p - wait_p
        non_p = p["step_ms"] - exch_p
        q = sorted(steps); iqr = (q[len(q) * 3 // 4] - q[len(q) // 4]) / M
        d = {"ratio": M / p["step_ms"], "step": M - p["step_ms"], "non": non - non_p, "own": own_m - own_p,
             "wait": wait_m - wait_p, "non_ratio": non / non_p, "iqr": iqr, "fwi": t["forward"] + t["input_grad"] + t["weight_grad"]}
        agg.setdefault(r["model"], []).append(d)
        rows_out.append("| %s | %d | %s | %.1f (%.0f%%) | %.1f | %.2f | %.1f / %.1f (%.2f) | %.1f / %.1f | %.1f / %.1f (%.1f imbalance, %.1f peer) | %.3f / %.3f |" % (
            pas, r["round"], r["model"], M, 100 * iqr, p["step_ms"], M / p["step_ms"], non, non_p, non / non_p, own_m, own_p,
            wait_m, wait_p, x.get("imbalance_wait", 0) * n, (x.get("meetings", 0) + x.get("peer_wait", 0)) * n,
            r["measured"]["f_measured"], p["ep_imbalance"]))
print("| pass | round | model | measured step ms, median of steps 4-12 (IQR / median) | predicted ms | meas / pred | step less the ep exchanges: meas / priced (ratio) | exchanges' own ms: meas / priced | waits for the last peer ms: meas / priced | f: run / priced |")
print("|" + "---|" * 10)
print("\n".join(rows_out))
print()
print("| model | runs | meas / pred | step less the exchanges: meas / priced | measured − predicted ms: step | step less the exchanges | exchanges' own | waits |")
print("|---|---|---|---|---|---|---|---|")
for model, ds in agg.items():
    rng = lambda k, f="%+.1f": (f + " to " + f + " (median " + f + ")") % (min(x[k] for x in ds), max(x[k] for x in ds), med(x[k] for x in ds))
    print("| %s | %d | %s | %s | %s | %s | %s | %s |" % (model, len(ds), rng("ratio", "%.2f"), rng("non_ratio", "%.2f"), rng("step"), rng("non"), rng("own"), rng("wait")))
    print("  within-run IQR/median:", rng("iqr", "%.2f"), " priced F+I+W:", rng("fwi", "%.1f"))
print()
print("| pass | model | profile's sync_wait_per_compute | priced F+I+W ms | waits priced at the default f: imbalance + peer (sync) | at the run's f: imbalance + peer | measured waits (median of rounds) | meas / pred at the default f (median of rounds) | at the run's f |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    d = os.path.dirname(path); pas = os.path.basename(d)
    rows = json.load(open(path))
    for model in ("example", "d256"):
        rs = [r for r in rows if r["model"] == model]
        prof = json.load(open(os.path.join(d, "%s-np2.json" % model)))
        r = rs[0]; n = r["per_step_blocks"]; x = r["predicted"]["ep_exchange_ms"]; y = r.get("predicted_at_measured_f", {}).get("ep_exchange_ms", {})
        w = med([med([q["moe_ep_all_to_all_wait_ms"] for q in map(json.loads, open(os.path.join(d, "run-%s-ep2-%d" % (model, k["round"] - 1), "metrics.jsonl"))) ][3:]) for k in rs])
        t = r["predicted"]["terms_ms"]
        ratio = med([k["measured"]["step_ms"] / k["predicted"]["step_ms"] for k in rs])
        ratio_f = med([k["measured"]["step_ms"] / k["predicted_at_measured_f"]["step_ms"] for k in rs])
        print("| %s | %s | %.3f | %.1f | %.1f + %.1f | %.1f + %.1f | %.1f | %.2f | %.2f |" % (pas, model, prof["measured"].get("sync_wait_per_compute", 0),
              t["forward"] + t["input_grad"] + t["weight_grad"], x["imbalance_wait"] * n, x["peer_wait"] * n, y.get("imbalance_wait", 0) * n, y.get("peer_wait", 0) * n, w, ratio, ratio_f))
