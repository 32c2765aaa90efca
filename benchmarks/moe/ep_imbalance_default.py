#!/usr/bin/env python3
"""The ep imbalance default measured by `cleave profile` against the runs (RESULTS-2026-12-01-w-measured-imbalance.md).

Per model (the moe example and the d-256 of RESULTS-2026-12-01-m-ep-pricing.md): `cleave profile` under mpiexec -n 2
(tp 1, the config's micro-batch, --rounds 3, --ep-imbalance-steps PSTEPS: the config's training at ep 2 for PSTEPS
steps, its `routing_imbalance`), a copy of the profile less that key (the rule before: the uniform-routing formula);
then ROUNDS interleaved rounds of `cleave train` at ep2 (dp2, STEPS steps), each step's busiest ep rank's routed rows
over the mean (ep_waits.py's busiest_over_mean) and the median step after the first 3; each run priced by `cleave
simulate --config` on the profile (the new default), on the copy (the old) and at the run's own f (the mean over steps
4+). Once per model, untimed: the same training at optimizer.lr 1e-30, min_lr 0 (no update moves a weight: the router at its initial weights on the config's
batches, every step) and at micro-batch 4 (the figure at another micro-batch). Every `cleave profile` and timed `cleave
train` runs under `flock LOCK` when given. Prints one JSON object per run and the tables.

Usage: ep_imbalance_default.py CLEAVE OUTDIR [--models example,d256] [--rounds 3] [--steps 12] [--profile-steps 8]
                               [--lock /work/build.lock]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ep_runs import ENV, launcher, layout_sets  # noqa: E402
from ep_waits import busiest_over_mean  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
D256 = {
    "model": {"type": "moe", "vocab_size": 256, "d_model": 256, "n_layers": 2, "n_heads": 4, "seq_len": 64,
              "ffn_hidden_size": 256, "n_experts": 8, "top_k": 2, "router": "softmax", "aux_loss_coef": 0.01},
    "batch": {"global_batch_size": 16, "micro_batch_size": 4},
    "optimizer": {"type": "adamw", "lr": 0.001},
    "train": {"seed": 7, "log_interval": 1000, "eval_batches": 0, "report": False},
    "checkpoint": {"save_final": False},
    "data": {"type": "synthetic"},
    "device": {"type": "cpu", "precision": "fp32"},
}


def write_configs(out):
    """example.json (examples/moe/config.json, eval and logging off) and d256.json; their paths by name."""
    ex = json.load(open(os.path.join(ROOT, "examples/moe/config.json")))
    ex["train"].update({"log_interval": 1000, "eval_interval": 100000})
    paths = {}
    for name, cfg in (("example", ex), ("d256", D256)):
        paths[name] = os.path.join(out, name + ".json")
        json.dump(cfg, open(paths[name], "w"), indent=1)
    return paths


def locked(lock, cmd):
    return (["flock", lock] if lock else []) + cmd


def profile(cleave, config, out, steps, lock):
    micro = json.load(open(config))["batch"]["micro_batch_size"]
    prof = os.path.join(out, os.path.basename(config).replace(".json", "-np2.json"))
    cmd = launcher(2) + [cleave, "profile", config, "--out", prof, "--world", "2", "--tp", "1", "--micro-batches",
                         str(micro), "--rounds", "3", "--ep-imbalance-steps", str(steps), "--set",
                         "parallel.data_parallel_size=2"]
    log = subprocess.run(locked(lock, cmd), env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    open(prof + ".log", "w").write(log.stdout + log.stderr)
    if log.returncode:
        sys.exit(log.stdout + log.stderr)
    before = prof.replace(".json", "-before.json")
    p = json.load(open(prof))
    p.pop("routing_imbalance")
    json.dump(p, open(before, "w"), indent=1)
    return prof, before


def train(cleave, config, run, steps, lock, extra=()):
    ranks, sets = layout_sets("ep2")
    cmd = launcher(ranks) + [cleave, "train", config, "--set", "train.steps=%d" % steps, "--set", "train.out_dir=" + run]
    for s in list(sets) + list(extra):
        cmd += ["--set", s]
    subprocess.run(locked(lock, cmd), check=True, env=ENV, stdin=subprocess.DEVNULL, capture_output=True)
    recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
    return {"per_step_f": [busiest_over_mean(r) for r in recs],
            "step_ms": statistics.median(r["step_ms"] for r in recs[3:])}


def simulate(cleave, config, prof, f=None):
    ranks, sets = layout_sets("ep2")
    cmd = [cleave, "simulate", "--config", config, "--world", str(ranks), "--profile", prof, "--json"]
    if f:
        cmd += ["--ep-imbalance", "%.4f" % f]
    for s in sets:
        cmd += ["--set", s]
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"step_ms": 1e3 * j["step_s"], "f": j["ep_imbalance"], "source": j["ep_imbalance_source"]}


def mean(xs):
    return sum(xs) / len(xs)


def tables(rows, figures):
    print("\n| model | profile's per-step figures (steps 1-N) | profile's figure (mean) | run steps 1-3 | run steps 4-12 "
          "(mean) | formula | profile / run 4-12 | formula / run 4-12 | lr 0, steps 1-12 (mean) | another micro-batch (example 4, d-256 2), steps 1-12 (mean) |")
    print("|" + "---|" * 10)
    for name, g in figures.items():
        runs = [r for r in rows if r["model"] == name]
        f_run = mean([mean(r["measured"]["per_step_f"][3:]) for r in runs])
        f13 = mean([mean(r["measured"]["per_step_f"][:3]) for r in runs])
        print("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            name, ", ".join("%.3f" % x for x in g["per_step"]), g["figure"], f13, f_run, g["formula"],
            g["figure"] / f_run, g["formula"] / f_run, mean(g["lr0"]), mean(g["micro4"])))
    print("\n| round | model | measured ms | new default: f, predicted ms (meas / pred) | old default: f, predicted "
          "(meas / pred) | at the run's f: f, predicted (meas / pred) |")
    print("|" + "---|" * 6)
    for r in rows:
        m = r["measured"]["step_ms"]
        cell = lambda p: "%.3f, %.1f (%.2f)" % (p["f"], p["step_ms"], m / p["step_ms"])
        print("| %d | %s | %.1f | %s | %s | %s |" % (r["round"], r["model"], m, cell(r["new"]), cell(r["old"]),
                                                     cell(r["at_f"])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("out")
    ap.add_argument("--models", default="example,d256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--profile-steps", type=int, default=8)
    ap.add_argument("--lock", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cleave = os.path.realpath(a.cleave)
    configs = {k: v for k, v in write_configs(a.out).items() if k in a.models.split(",")}
    profiles, figures = {}, {}
    for name, config in configs.items():
        profiles[name] = profile(cleave, config, a.out, a.profile_steps, a.lock)
        r = json.load(open(profiles[name][0]))["routing_imbalance"]
        lr0 = train(cleave, config, os.path.join(a.out, "run-%s-lr0" % name), a.steps, "", ["optimizer.lr=1e-30", "optimizer.min_lr=0"])
        micro4 = train(cleave, config, os.path.join(a.out, "run-%s-micro4" % name), a.steps, "",
                       ["batch.micro_batch_size=4"] if name == "example" else ["batch.micro_batch_size=2"])
        figures[name] = {"figure": r["busiest_over_mean"], "per_step": r["per_step"],
                         "formula": simulate(cleave, config, profiles[name][1])["f"],
                         "lr0": lr0["per_step_f"], "micro4": micro4["per_step_f"]}
        print(json.dumps({"model": name, **figures[name]}), flush=True)
    rows = []
    for rnd in range(a.rounds):
        for name, config in configs.items():
            meas = train(cleave, config, os.path.join(a.out, "run-%s-%d" % (name, rnd)), a.steps, a.lock)
            f_run = mean(meas["per_step_f"][3:])
            row = {"round": rnd + 1, "model": name, "measured": meas,
                   "new": simulate(cleave, config, profiles[name][0]),
                   "old": simulate(cleave, config, profiles[name][1]),
                   "at_f": simulate(cleave, config, profiles[name][0], f_run)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    json.dump({"rows": rows, "figures": figures}, open(os.path.join(a.out, "rows.json"), "w"), indent=1)
    tables(rows, figures)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        d = json.load(open(sys.argv[2]))
        tables(d["rows"], d["figures"])
    else:
        main()
