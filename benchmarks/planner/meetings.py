#!/usr/bin/env python3
"""Predicted against measured for named plans, priced by two cleave binaries on one profile (RESULTS-trial-2026-11-29-c).

Each plan is a list of --set overrides on CONFIG. Rounds are interleaved (A B C A B C ...): every round trains each
plan once under `mpiexec -n WORLD` (with --oversubscribe past this machine's cores) for STEPS steps, and the run's
figure is the median step after the first 2 (as `cleave plan --trial` takes it); a plan's figure is the median of its
rounds'. Each binary prices each plan with `cleave simulate --config ... --json` on PROFILE. Prints one row per plan:
the predictions, the measured median, its rounds and the ratios; with --terms the new terms of the second binary.

Usage: meetings.py --before BIN --after BIN --profile FILE --config CONFIG --world N [--rounds R] [--steps S]
                   --plan "k=v k=v ..." [--plan ...] [--plans-from PLAN.json --top K] [--save FILE | --load FILE]
--save writes the plans and their measured rounds (trained with --after); --load prices a saved measurement again
(no training), e.g. with a binary built later.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")


def priced(cleave, config, world, profile, sets):
    """The predicted step (s) and breakdown of one plan."""
    cmd = [cleave, "simulate", "--config", config, "--world", str(world), "--profile", profile, "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if out.returncode != 0:
        return None, {}, out.stderr.strip().splitlines()[-1:]
    j = json.loads(out.stdout)
    return j["step_s"], j, []


def trained(cleave, config, world, steps, sets, run_dir):
    """Median step (s) of one run after its first 2 steps; None when it fails."""
    cmd = ["mpiexec"] + (["--oversubscribe"] if world > os.cpu_count() else []) + ["-n", str(world), cleave, "train",
                                                                                   config]
    for s in sets + [f"train.steps={steps}", "train.eval_interval=0", "train.eval_batches=0", "train.report=false",
                     "checkpoint.save_final=false", "checkpoint.interval=0", f"train.out_dir={run_dir}"]:
        cmd += ["--set", s]
    if subprocess.run(cmd, env=ENV, capture_output=True, text=True).returncode != 0:
        return None
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if l.strip()]
    times = [r["step_ms"] / 1e3 for r in rows[2:] if "step_ms" in r]
    return statistics.median(times) if times else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="'-' to leave the before column out")
    ap.add_argument("--after", required=True)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--plan", action="append", default=[])
    ap.add_argument("--plans-from", help="a `cleave plan --json` file: its top plans' overrides")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--save")
    ap.add_argument("--load")
    args = ap.parse_args()
    plans = [p.split() for p in args.plan]
    if args.plans_from:
        plans += [p["overrides"] for p in json.load(open(args.plans_from))["plans"][:args.top]]
    config = os.path.realpath(args.config)
    measured = [[] for _ in plans]
    if args.load:
        saved = json.load(open(args.load))
        plans, measured = saved["plans"], saved["measured"]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                for i, sets in enumerate(plans):
                    m = trained(args.after, config, args.world, args.steps, sets, os.path.join(tmp, f"p{i}_r{r}"))
                    if m is not None:
                        measured[i].append(m)
                    print(f"round {r + 1}, plan {i + 1}: {m} (load {open('/proc/loadavg').read().split()[0]})",
                          file=sys.stderr, flush=True)
    if args.save:
        json.dump({"plans": plans, "measured": measured}, open(args.save, "w"))
    print(f"load {open('/proc/loadavg').read().split()[:3]}")
    print("| plan | before ms | after ms | measured ms (rounds) | before/meas | after/meas | new terms after (ms) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for sets, m in zip(plans, measured):
        b, _, eb = priced(args.before, config, args.world, args.profile, sets) if args.before != "-" else (None, {}, [])
        a, j, ea = priced(args.after, config, args.world, args.profile, sets)
        bd = j.get("breakdown_s", {})
        med = statistics.median(m) if m else None
        name = (f"{j['layout']} {j['schedule']} v{j['virtual_stages']} micro {j['micro_batch']} zero {j['zero_stage']}"
                f"{' sp' if j['sequence_parallel'] else ''} {j['recompute']}") if j else " ".join(sets)
        terms = ", ".join(f"{k} {bd[k] * 1e3:.2f}" for k in ("point_to_point_wait", "count_exchange") if bd.get(k))
        ratio = lambda p: f"{p / med:.2f}" if p and med else "-"
        ms = lambda p, err: f"{p * 1e3:.2f}" if p else ("failed: " + " ".join(err) if err else "-")
        rounds = "/".join(f"{x * 1e3:.1f}" for x in m)
        print(f"| {name} | {ms(b, eb)} | {ms(a, ea)} | {med * 1e3 if med else 0:.2f} ({rounds}) | {ratio(b)} | {ratio(a)} | {terms} |")


if __name__ == "__main__":
    main()
