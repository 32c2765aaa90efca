#!/usr/bin/env python3
"""Reprices the measured plans of kept oversubscribed trials (benchmarks/planner/oversubscribed.sh with KEEP=DIR)
with two builds of `cleave` on each trial's own profile, and prints predicted before / after against measured, for the
step and for each of the trial's rows (docs/planner.md, "Predicted against measured, term by term"). No training runs:
only `cleave simulate`. Usage: reprice_kept.py CONFIG BEFORE_BIN AFTER_BIN DIR [DIR ...]   (DIR holds prof.json and
plan_w<WORLD>.json)."""
import glob
import json
import os
import re
import subprocess
import sys


def simulate(cleave, config, world, profile, overrides):
    sets = [a for o in overrides for a in ("--set", o)]
    out = subprocess.run([cleave, "simulate", "--config", config, "--world", str(world), "--profile", profile,
                          "--json", *sets], capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])


def row_s(breakdown, predicted_terms):
    """The row's predicted seconds from the terms it names ("input_grad 18.864 + weight_grad 11.725")."""
    names = re.findall(r"([a-z_]+) [0-9.]+", predicted_terms)
    return sum(breakdown.get(n, 0.0) for n in names) if names else None


def main():
    config, before, after, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "plan_w*.json")), reverse=True):
            world = int(re.search(r"plan_w(\d+)\.json", path).group(1))
            for p in json.load(open(path))["plans"]:
                if "measured_step_s" not in p:
                    continue
                b = simulate(before, config, world, os.path.join(d, "prof.json"), p["overrides"])
                a = simulate(after, config, world, os.path.join(d, "prof.json"), p["overrides"])
                m = p["measured_step_s"]
                knobs = " ".join(o.split("=")[0].split(".")[-1] + "=" + o.split("=")[1] for o in p["overrides"]
                                 if re.search(r"(schedule|zero_stage|sequence_parallel|recompute)=", o))
                print(f"{os.path.basename(d)} w{world} {p['layout']} micro {p['micro_batch']} {knobs}: pred before "
                      f"{b['step_s'] * 1e3:.2f} after {a['step_s'] * 1e3:.2f} ms, measured {m * 1e3:.2f} "
                      f"(spread {p['measured_spread'] * 100:.1f}%): pred/meas {b['step_s'] / m:.2f} -> {a['step_s'] / m:.2f}")
                for t in p.get("measured_terms", []):
                    rb, ra = row_s(b["breakdown_s"], t["predicted_terms"]), row_s(a["breakdown_s"], t["predicted_terms"])
                    if rb is None or (rb == ra and t["row"] == "forward (F)"):
                        continue
                    print(f"    {t['row']:<32} before {rb * 1e3:8.2f}  after {ra * 1e3:8.2f}  meas {t['measured_s'] * 1e3:8.2f}")


if __name__ == "__main__":
    main()
