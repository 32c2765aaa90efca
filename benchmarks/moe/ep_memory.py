#!/usr/bin/env python3
"""The memory plan at expert parallelism against the allocator's measured peak (RESULTS-2026-11-30-l-ep-memory.md).

Per model and layout: `cleave train` for STEPS steps (under `flock LOCK` when given); from its run.json every rank's
measured peak (the sum of its categories' peaks, as the plan's total sums its categories) and the trainer's own plan;
from metrics.jsonl (`moe_ep_rows_b<block>_s<src>_d<dst>`, per step, summed over the step's micro-batches; S and P from
the per-micro-batch maxima `moe_ep_mb_rows_b<block>_d<dst>` / `moe_ep_mb_mean_rows_b<block>` where logged) the three
routing figures, each a rank's rows in a block over the block's mean rows per rank:
  F: the time model's, 1 + the mean over blocks of (the busiest rank's - 1), median over the steps (ep_waits.py's);
  S: the memory plan's stash figure, the largest over ranks and steps of a rank's mean over the blocks;
  P: the memory plan's peak figure, the largest over ranks, blocks and steps.
Beside them `cleave simulate --config --json`'s memory plan (memory_plan_total, largest over pp ranks) on PROFILE:
the default, at --ep-imbalance F, and (a build with the two memory figures) at --ep-stash-imbalance S
--ep-peak-imbalance P; with --before BIN the older build's default and its plan at F too.

Usage: ep_memory.py CLEAVE OUTDIR --model NAME=CONFIG@ep2,ep4 [--model ...] --profile NAME=FILE [...]
                    [--steps 12] [--lock /work/build.lock] [--before BIN]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from ep_runs import ENV, launcher, layout_sets, rows_per_destination

MIB = 1024.0 * 1024.0


def planned(cleave, config, profile, layout, extra=()):
    """The memory plan's total, largest over pp ranks (bytes)."""
    ranks, sets = layout_sets(layout)
    cmd = [cleave, "simulate", "--config", config, "--world", str(ranks), "--profile", profile, "--json"] + list(extra)
    for s in sets:
        cmd += ["--set", s]
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return max(r["memory_plan_total"] for r in j["ranks"])


def micro_batch_figures(rec):
    """(S, P) of one step from its per-micro-batch maxima (moe_ep_mb_rows_b<i>_d<d> over moe_ep_mb_mean_rows_b<i>);
    None for a build without them. Exact with any number of micro-batches a step for P; S from each block's most
    rows over the micro-batches, so at least any one micro-batch's (the safe side)."""
    mean = {int(m.group(1)): v for key, v in rec.items() if (m := re.match(r"moe_ep_mb_mean_rows_b(\d+)$", key))}
    if not mean:
        return None
    share = {}
    for key, v in rec.items():
        m = re.match(r"moe_ep_mb_rows_b(\d+)_d(\d+)$", key)
        if m and mean.get(int(m.group(1)), 0) > 0:
            share.setdefault(int(m.group(1)), {})[int(m.group(2))] = v / mean[int(m.group(1))]
    ranks = next(iter(share.values())).keys()
    return (max(statistics.mean(share[b][d] for b in share) for d in ranks),
            max(max(ds.values()) for ds in share.values()))


def routing_figures(metrics):
    """(F, S, P) over the steps of metrics.jsonl (see the module's comment); None without ep rows. S and P from the
    per-micro-batch maxima where the build logs them, else from the step's sums (exact at one micro-batch a step)."""
    f_steps, s, p = [], 0.0, 0.0
    for rec in metrics:
        rows = rows_per_destination(rec)
        if not rows:
            return None
        share = {b: {d: v / statistics.mean(ds.values()) for d, v in ds.items()} for b, ds in rows.items()}
        f_steps.append(1 + statistics.mean(max(ds.values()) - 1 for ds in share.values()))
        ranks = next(iter(share.values())).keys()
        per_micro_batch = micro_batch_figures(rec)
        if per_micro_batch:
            s, p = max(s, per_micro_batch[0]), max(p, per_micro_batch[1])
            continue
        s = max(s, max(statistics.mean(share[b][d] for b in share) for d in ranks))
        p = max(p, max(max(ds.values()) for ds in share.values()))
    return statistics.median(f_steps), s, p


def train(cleave, config, layout, steps, run, lock):
    ranks, sets = layout_sets(layout)
    cmd = launcher(ranks) + [cleave, "train", config, "--set", "train.steps=%d" % steps, "--set",
                             "train.out_dir=" + run]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run((["flock", lock] if lock else []) + cmd, check=True, env=ENV, stdin=subprocess.DEVNULL,
                   capture_output=True)
    info = json.load(open(os.path.join(run, "run.json")))
    peaks = [r["peak_total"] for r in info["ranks"]]
    metrics = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if line.strip()]
    f, s, p = routing_figures(metrics)
    return {"peak_by_rank": peaks, "peak": max(peaks), "peak_rank": peaks.index(max(peaks)),
            "trainer_plan": max(r["estimate_total_bytes"] for r in info["ranks"]), "F": f, "S": s, "P": p}


def pct(plan, peak):
    return "%.2f (%+.1f%%)" % (plan / MIB, 100.0 * (plan - peak) / peak)


def table(rows):
    print("| model | layout | measured peak MiB (rank) | F / S / P | before: default | before: at F | after: default "
          "(dropless bound) | after: at F, S, P | after: the trainer's plan |")
    print("|" + "---|" * 9)
    for r in rows:
        m = r["measured"]
        b = r.get("before", {})
        print("| %s | %s | %.2f (%d) | %.3f / %.3f / %.3f | %s | %s | %s | %s | %s |" % (
            r["model"], r["layout"], m["peak"] / MIB, m["peak_rank"], m["F"], m["S"], m["P"],
            pct(b["default"], m["peak"]) if b else "-", pct(b["at_f"], m["peak"]) if b else "-",
            pct(r["after"]["default"], m["peak"]), pct(r["after"]["at_fsp"], m["peak"]),
            pct(m["trainer_plan"], m["peak"])))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        table(json.load(open(sys.argv[2])))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("out")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--profile", action="append", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lock", default="")
    ap.add_argument("--before", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cleave = os.path.realpath(a.cleave)
    profiles = dict(p.split("=", 1) for p in a.profile)
    rows = []
    for m in a.model:
        name, rest = m.split("=", 1)
        config, _, layouts = rest.partition("@")
        for layout in layouts.split(","):
            run = os.path.join(a.out, "run-%s-%s" % (name, layout))
            measured = train(cleave, config, layout, a.steps, run, a.lock)
            at_f = ["--ep-imbalance", "%.4f" % measured["F"]]
            at_sp = ["--ep-stash-imbalance", "%.4f" % measured["S"], "--ep-peak-imbalance", "%.4f" % measured["P"]]
            row = {"model": name, "layout": layout, "measured": measured,
                   "after": {"default": planned(cleave, config, profiles[name], layout),
                             "at_fsp": planned(cleave, config, profiles[name], layout, at_f + at_sp)}}
            if a.before:
                before = os.path.realpath(a.before)
                row["before"] = {"default": planned(before, config, profiles[name], layout),
                                 "at_f": planned(before, config, profiles[name], layout, at_f)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    json.dump(rows, open(os.path.join(a.out, "rows.json"), "w"), indent=1)
    table(rows)


if __name__ == "__main__":
    main()
