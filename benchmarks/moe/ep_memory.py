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
the default (the dropless bound), at the run's S and P as the config's keys (`--set parallel.ep_stash_imbalance=S
--set parallel.ep_peak_imbalance=P`, rounded up at 4 decimals; the flags --ep-stash-imbalance/--ep-peak-imbalance
too, which must agree), and at the figures from the step's sums (S_step, P_step: what RESULTS-l read). Then the
plan as the line it is in S and P (at (1,1), (1,2), (2,2)) priced at each rank's own co-occurring figures (one rank,
one step: every block's stash at its rows, the peak block's phase at its rows) beside that rank's measured peak, and
at the largest of them as the config's keys (the tightest pair that bounds every rank and step).

Usage: ep_memory.py CLEAVE OUTDIR --model NAME=CONFIG@ep2,ep4 [--model ...] --profile NAME=FILE [...]
                    [--steps 12] [--lock /work/build.lock] [--reuse (a run already in OUTDIR is read, not re-run)]
       ep_memory.py --table OUTDIR/rows.json
"""
import argparse
import json
import math
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


def micro_batch_shares(rec):
    """{rank: {block: the rank's most rows in the block in one micro-batch of the step, over the mean}}; None for a
    build that does not log them."""
    mean = {int(m.group(1)): v for key, v in rec.items() if (m := re.match(r"moe_ep_mb_mean_rows_b(\d+)$", key))}
    if not mean:
        return None
    out = {}
    for key, v in rec.items():
        m = re.match(r"moe_ep_mb_rows_b(\d+)_d(\d+)$", key)
        if m and mean.get(int(m.group(1)), 0) > 0:
            out.setdefault(int(m.group(2)), {})[int(m.group(1))] = v / mean[int(m.group(1))]
    return out


def plan_slopes(plan):
    """The memory plan as the line it is in the two figures: (at S = P = 1, per unit of P, per unit of S), from the
    plan at (1, 1), (1, 2) and (2, 2) (P >= S on each)."""
    b11, b12, b22 = plan(["--ep-stash-imbalance", "1", "--ep-peak-imbalance", "1"]), \
        plan(["--ep-stash-imbalance", "1", "--ep-peak-imbalance", "2"]), \
        plan(["--ep-stash-imbalance", "2", "--ep-peak-imbalance", "2"])
    return b11, b12 - b11, b22 - b12


def co_occurring(metrics, slopes):
    """Per rank: the plan at that rank's own figures of one micro-batch (every block's stash at its own rows, the
    last routed block's experts' phase at its rows: its backward runs first, with every stash live; the plan's line
    at S = the rank's mean over the blocks, P = the last block's), the largest over the steps: {rank: (bytes, step,
    S, P)}. The largest over the ranks is the tightest pair that bounds every rank's measured peak on this run (P
    raised to S where below: the keys refuse P < S); it needs the peak at the last block's backward, as measured
    here, where the keys' P (any block) is safe for a peak at any block's."""
    base, per_p, per_s = slopes
    out = {}
    for step, rec in enumerate(metrics):
        shares = micro_batch_shares(rec)
        if not shares:
            return None
        for d, f in shares.items():
            stash, last = statistics.mean(f.values()), f[max(f)]
            need = per_s * (stash - 1) + per_p * (last - 1)
            if need + base > out.get(d, (0,))[0]:
                out[d] = (need + base, step, stash, max(stash, last))
    return out


def routing_figures(metrics):
    """{F, S, P, S_step, P_step} over the steps of metrics.jsonl (see the module's comment); None without ep rows. S
    and P from the per-micro-batch maxima where the build logs them (else None), S_step and P_step from the step's
    sums (exact at one micro-batch a step, under a micro-batch's figures at several)."""
    f_steps, s, p, s_step, p_step, logged = [], 0.0, 0.0, 0.0, 0.0, True
    for rec in metrics:
        rows = rows_per_destination(rec)
        if not rows:
            return None
        share = {b: {d: v / statistics.mean(ds.values()) for d, v in ds.items()} for b, ds in rows.items()}
        f_steps.append(1 + statistics.mean(max(ds.values()) - 1 for ds in share.values()))
        ranks = next(iter(share.values())).keys()
        s_step = max(s_step, max(statistics.mean(share[b][d] for b in share) for d in ranks))
        p_step = max(p_step, max(max(ds.values()) for ds in share.values()))
        per_micro_batch = micro_batch_figures(rec)
        logged = logged and per_micro_batch is not None
        if per_micro_batch:
            s, p = max(s, per_micro_batch[0]), max(p, per_micro_batch[1])
    return {"F": statistics.median(f_steps), "S": s if logged else None, "P": p if logged else None,
            "S_step": s_step, "P_step": p_step}


def metrics_of(run):
    return [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if line.strip()]


def train(cleave, config, layout, steps, run, lock, reuse=False):
    ranks, sets = layout_sets(layout)
    cmd = launcher(ranks) + [cleave, "train", config, "--set", "train.steps=%d" % steps, "--set",
                             "train.out_dir=" + run]
    for s in sets:
        cmd += ["--set", s]
    if not (reuse and os.path.exists(os.path.join(run, "run.json"))):
        subprocess.run((["flock", lock] if lock else []) + cmd, check=True, env=ENV, stdin=subprocess.DEVNULL,
                       capture_output=True)
    info = json.load(open(os.path.join(run, "run.json")))
    peaks = [r["peak_total"] for r in info["ranks"]]
    metrics = metrics_of(run)
    return dict({"peak_by_rank": peaks, "peak": max(peaks), "peak_rank": peaks.index(max(peaks)),
                 "trainer_plan": max(r["estimate_total_bytes"] for r in info["ranks"])}, **routing_figures(metrics))


def pct(plan, peak):
    return "%.2f (%+.1f%%)" % (plan / MIB, 100.0 * (plan - peak) / peak)


def up(x):
    """x rounded up at 4 decimals (a figure passed on is never below the run's)."""
    return "%.4f" % (math.ceil(x * 1e4) / 1e4)


def figure_keys(s, p):
    """The run's figures as the config's keys (what the trainer's own plan reads)."""
    return ["--set", "parallel.ep_stash_imbalance=" + up(s), "--set", "parallel.ep_peak_imbalance=" + up(p)]


def table(rows):
    print("| model | layout | measured peak MiB (rank) | F | S / P per micro-batch | S / P from the step's sums | "
          "default (dropless bound) | at the run's S, P (config keys) | at the step sums' S, P | the trainer's plan | "
          "co-occurring S / P (one rank, one step) | at them (config keys) | each rank's own figures: plan - peak |")
    print("|" + "---|" * 13)
    for r in rows:
        m = r["measured"]
        print("| %s | %s | %.2f (%d) | %.3f | %s | %.3f / %.3f | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["layout"], m["peak"] / MIB, m["peak_rank"], m["F"],
            "%.3f / %.3f" % (m["S"], m["P"]) if m["S"] else "-", m["S_step"], m["P_step"],
            pct(r["plan"]["default"], m["peak"]), pct(r["plan"]["at_keys"], m["peak"]) if m["S"] else "-",
            pct(r["plan"]["at_step_sums"], m["peak"]), pct(m["trainer_plan"], m["peak"]),
            "%.3f / %.3f" % (m["tight"]["S"], m["tight"]["P"]) if "tight" in m else "-",
            pct(r["plan"]["at_tight_keys"], m["peak"]) if "tight" in m else "-",
            ", ".join("%+d B" % (m["per_rank_need"][d] - m["peak_by_rank"][int(d)])
                      for d in sorted(m.get("per_rank_need", {}), key=int))))


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
    ap.add_argument("--reuse", action="store_true")
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
            measured = train(cleave, config, layout, a.steps, run, a.lock, a.reuse)
            plan = lambda extra=(): planned(cleave, config, profiles[name], layout, list(extra))
            row = {"model": name, "layout": layout, "measured": measured,
                   "plan": {"default": plan(), "at_step_sums": plan(figure_keys(measured["S_step"], measured["P_step"]))}}
            slopes = plan_slopes(plan)
            per_rank = co_occurring(metrics_of(run), slopes)
            if per_rank:
                measured["per_rank_need"] = {d: v[0] for d, v in per_rank.items()}
                tight = max(per_rank.values())
                measured["tight"] = {"S": tight[2], "P": tight[3], "step": tight[1]}
                row["plan"]["at_tight_keys"] = plan(figure_keys(tight[2], tight[3]))
            if measured["S"]:
                row["plan"]["at_keys"] = plan(figure_keys(measured["S"], measured["P"]))
                flags = ["--ep-stash-imbalance", up(measured["S"]), "--ep-peak-imbalance", up(measured["P"])]
                row["plan"]["at_flags"] = plan(flags)
            print(json.dumps(row), flush=True)
            rows.append(row)
    json.dump(rows, open(os.path.join(a.out, "rows.json"), "w"), indent=1)
    table(rows)


if __name__ == "__main__":
    main()
