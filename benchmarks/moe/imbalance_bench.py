#!/usr/bin/env python3
"""The expert-parallel imbalance benchmark (issue 36 part 5): for each named routing workload
(model.forced_routing: uniform, zipf, one_expert, empty_rank:EP, moving_hot) at ep 2 and 4, train the moe
model of bench_moe.json on EP ranks (mpirun, world = ep, so dp = ep and one expert-dp replica), read what every
rank's dispatch moved from metrics.jsonl (moe_ep_rows_b<i>_s<s>_d<d>, moe_ep_bytes_...: per step, summed over
the micro-batches), and check it EQUALS what the oracle (oracle.py, independent of the engine) says the workload
must move; then put the measured exchange time per step beside the planner's prediction.

Measured (metrics.jsonl, mean over ranks, per step): moe_ep_all_to_all_ms, a rank's wall time in the count
exchanges, dispatches and combines, forward and backward, split by the router log into the wait for the last peer
(moe_ep_all_to_all_wait_ms: per call, the rank's time less the shortest any rank of the ep group spent in it) and
the rest, the exchanges' own time. Predicted (`cleave simulate --config --json --profile P`, ep_exchange_s: one moe
block per micro-batch, x blocks x micro-batches): `own` (the four all-to-alls, one message per peer on the
profile's point-to-point fit; their meetings; the count exchange) and `wait` (the peers' lost time from the
profile's sync_wait_per_compute, and the busiest rank's extra expert compute at the workload's exact imbalance).
P: --profile, else one measured first (`cleave profile bench_moe.json` on 2 ranks, about 10 s).
--before CLEAVE: also price every cell with another build's cleave on the same profile (a planner before a pricing
change; an older build ignores profile keys it does not know) and print its wait and own time beside (--markdown).

Exit status 1 on any count or byte mismatch (the oracle check is exact) or a run without the split fields;
timings are reported, not asserted.

  benchmarks/moe/imbalance_bench.py BUILD_DIR [--eps 2,4] [--workloads uniform,zipf,...] [--steps 4]
                                    [--rounds 1] [--profile FILE] [--smoke] [--markdown]
                                    [--launcher "mpirun --oversubscribe"] [--before OLD_CLEAVE]
--smoke: one workload (zipf), ep 2, 3 steps: the ctest entry moe_imbalance_bench_smoke.
--rounds R: R interleaved rounds (each round runs every (ep, workload) cell once, in the same order), every run
checked against the oracle first; a cell's measured time is the median over rounds of each run's median over
steps 2.., and the spread (min-max of the per-round medians) is reported beside it.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402  (the same folder; no PyPI dependencies)

from train_run import train_metrics

ROWS = re.compile(r"moe_ep_rows_b(\d+)_s(\d+)_d(\d+)$")
BYTES = re.compile(r"moe_ep_bytes_b(\d+)_s(\d+)_d(\d+)$")


def load(path):
    with open(path) as f:
        return json.load(f)


def run_train(launcher, cleave, config, ep, workload, steps, out_dir):
    return train_metrics("imbalance_bench", launcher, cleave, config, ep,
                         [f"parallel.expert_model_parallel_size={ep}", f"model.forced_routing={workload}",
                          f"batch.global_batch_size={4 * ep}", f"train.steps={steps}"], out_dir)


KINDS = ("count_exchange", "dispatch", "combine", "dispatch_grad", "combine_grad")


def measure_profile(launcher, cleave, config, out):
    """`cleave profile` of the benchmark's model on 2 ranks (the planner's measured fits, waits and time sharing)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = launcher.split() + ["-np", "2", "--mca", "btl", "self,vader", cleave, "profile", config, "--out", out,
                              "--tp", "1", "--micro-batches", "2", "--set", "parallel.expert_model_parallel_size=2",
                              "--set", "batch.global_batch_size=8"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"imbalance_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return out


def predicted(cleave, config, ep, imbalance, profile):
    cmd = [cleave, "simulate", "--config", config, "--world", str(ep), "--json", "--profile", profile,
           "--set", f"parallel.expert_model_parallel_size={ep}", "--set", f"batch.global_batch_size={4 * ep}"]
    if imbalance:
        cmd += ["--ep-imbalance", f"{imbalance:.6f}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"imbalance_bench: {' '.join(cmd)} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def check(metrics, cfg, ep, workload, micro_batches):
    """Compares every step's moved rows and bytes with the oracle's; returns (mismatches, compared, imbalances)."""
    m = cfg["model"]
    tokens = cfg["batch"]["micro_batch_size"] * m["seq_len"]
    wrong, compared, imbalances = [], 0, []
    for step, row in enumerate(metrics):
        want = oracle.dispatch_rows(workload, step, tokens, m["n_experts"], m["top_k"], ep)
        computed = [sum(want[q][r] for q in range(ep)) for r in range(ep)]
        imbalances.append(max(computed) / (sum(computed) / ep))
        seen = 0
        for key, value in row.items():
            for pattern, scale in ((ROWS, 1), (BYTES, m["d_model"] * 4)):
                hit = pattern.match(key)
                if not hit:
                    continue
                seen += 1
                _, s, d = (int(x) for x in hit.groups())
                expected = micro_batches * want[s][d] * scale
                compared += 1
                if int(round(value)) != expected:
                    wrong.append(f"step {step} {key}: moved {value:g}, oracle {expected}")
        if seen == 0:
            wrong.append(f"step {step}: metrics.jsonl has no moe_ep_rows_* fields (keys: {sorted(row)[:8]}...)")
    return wrong, compared, imbalances


def oracle_expert_extra(workload, ep, cfg, steps, fit):
    """The busiest rank's extra expert time over the mean rank's per step in ms (mean over steps 2..), from the
    oracle's routed rows and non-empty (source, expert) groups per rank and the profile's expert_rows fit:
    (rows only: per row x rows; with groups: + the fit's intercept / E per non-empty group), every pass."""
    m = cfg["model"]
    experts, top_k = m["n_experts"], m["top_k"]
    tokens = cfg["batch"]["micro_batch_size"] * m["seq_len"]
    per_row = (fit["forward_ns_per_row"] + fit["input_grad_ns_per_row"] + fit["weight_grad_ns_per_row"]) * 1e-6
    per_group = (fit["forward_us"] + fit["input_grad_us"] + fit["weight_grad_us"]) * 1e-3 / experts
    name, parts = oracle.parse_workload(workload)
    per_rank = experts // ep
    rows_only, with_groups = [], []
    for step in range(1, steps):
        count = [0] * experts
        for n in range(tokens):
            for e in oracle.token_experts(name, step, n, experts, top_k, parts):
                count[e] += 1
        rows = [ep * sum(count[r * per_rank:(r + 1) * per_rank]) for r in range(ep)]
        groups = [ep * sum(1 for c in count[r * per_rank:(r + 1) * per_rank] if c > 0) for r in range(ep)]
        t = [per_row * rows[r] + per_group * groups[r] for r in range(ep)]
        rows_only.append(per_row * (max(rows) - statistics.mean(rows)))
        with_groups.append(max(t) - statistics.mean(t))
    per_step = m["n_layers"] * (4 // cfg["batch"]["micro_batch_size"])
    return statistics.mean(rows_only) * per_step, statistics.mean(with_groups) * per_step


def split_of(metrics):
    """Per-step medians (steps 2..) of the measured total, wait and own time, and of each kind's own and wait, in ms;
    None when the run reports no split (an engine without the router log's kinds)."""
    steady = metrics[1:]
    if not steady or any("moe_ep_all_to_all_wait_ms" not in r for r in steady):
        return None
    med = lambda key: statistics.median(key(r) for r in steady)  # noqa: E731
    out = {"total": med(lambda r: r["moe_ep_all_to_all_ms"]), "wait": med(lambda r: r["moe_ep_all_to_all_wait_ms"]),
           "own": med(lambda r: r["moe_ep_all_to_all_ms"] - r["moe_ep_all_to_all_wait_ms"])}
    for k in KINDS:
        out[k + "_own"] = med(lambda r: r[f"moe_ep_{k}_ms"] - r[f"moe_ep_{k}_wait_ms"])
        out[k + "_wait"] = med(lambda r: r[f"moe_ep_{k}_wait_ms"])
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("--eps", default="2,4")
    p.add_argument("--workloads", default="uniform,zipf,one_expert,empty_rank,moving_hot")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1, help="interleaved repeated rounds (medians over them)")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--launcher", default="mpirun --oversubscribe", help="MPI launcher; -np EP is appended")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--profile", help="hardware profile for the prediction (default: measure one on 2 ranks first)")
    p.add_argument("--before", help="another cleave binary whose prediction on the same profile is printed beside")
    a = p.parse_args(argv)
    if a.smoke:
        a.eps, a.workloads, a.steps, a.rounds = "2", "zipf", 3, 1
    if a.rounds < 1:
        p.error(f"--rounds must be at least 1, got {a.rounds}")
    cleave = os.path.join(a.build, "bin", "cleave")
    config = os.path.join(HERE, "bench_moe.json")
    cfg = load(config)
    cells = [(ep, f"empty_rank:{ep}" if name == "empty_rank" else name)
             for ep in (int(x) for x in a.eps.split(",")) for name in a.workloads.split(",")]
    micro_batches = 4 // cfg["batch"]["micro_batch_size"]  # global 4·ep samples over dp = ep ranks
    runs = {cell: [] for cell in cells}  # cell -> [(wrong, compared, imbalances, split_of(metrics))]
    failed = False
    scratch = tempfile.TemporaryDirectory()
    profile = a.profile or measure_profile(a.launcher, cleave, config, os.path.join(scratch.name, "profile.json"))
    for _ in range(a.rounds):  # interleaved: every cell once per round, so drift on the machine hits all alike
        for ep, workload in cells:
            with tempfile.TemporaryDirectory() as tmp:
                metrics = run_train(a.launcher, cleave, config, ep, workload, a.steps, os.path.join(tmp, "run"))
            wrong, compared, imbalances = check(metrics, cfg, ep, workload, micro_batches)
            failed = failed or bool(wrong)
            for w in wrong[:10]:
                print(f"MISMATCH ep{ep} {workload}: {w}", file=sys.stderr)
            split = split_of(metrics)
            if split is None:
                failed = True
                print(f"MISSING ep{ep} {workload}: metrics.jsonl has no moe_ep_all_to_all_wait_ms", file=sys.stderr)
            runs[(ep, workload)].append((wrong, compared, imbalances, split))
    rows_out = []
    fit = load(profile).get("measured", {}).get("expert_rows")
    per_step = cfg["model"]["n_layers"] * micro_batches  # moe blocks x micro-batches
    for ep, workload in cells:
        cell = runs[(ep, workload)]
        exact = statistics.mean(cell[0][2])
        splits = [c[3] for c in cell if c[3] is not None]
        med = lambda key: statistics.median(sp[key] for sp in splits) if splits else None  # noqa: E731
        price = predicted(cleave, config, ep, exact, profile)
        priced = {k: v * per_step * 1e3 for k, v in price["ep_exchange_s"].items()}
        before = None
        if a.before:
            old = predicted(a.before, config, ep, exact, profile)
            before = {k: v * per_step * 1e3 for k, v in old["ep_exchange_s"].items()}
        rows_out.append({
            "ep": ep, "workload": workload, "steps": a.steps, "rounds": len(cell),
            "compared": sum(c[1] for c in cell), "mismatches": sum(len(c[0]) for c in cell), "imbalance": exact,
            "measured_ms": {k: med(k) for k in (["total", "own", "wait"] + [f"{k}_{w}" for k in KINDS
                                                                               for w in ("own", "wait")])},
            "measured_rounds_total_ms": [sp["total"] for sp in splits],
            "predicted_ms": priced,
            "before_predicted_ms": before,
            "predicted_step_ms": price["step_s"] * 1e3,
            "profile": price["profile"],
            "oracle_extra_ms": (oracle_expert_extra(workload, ep, cfg, a.steps, fit[0]) if fit else None),
        })
    if a.markdown:
        print(profile_line(profile))
        print()
        print_markdown(rows_out)
    else:
        print(json.dumps(rows_out, indent=1))
    print("imbalance_bench: " + ("FAILED: moved rows differ from the oracle, or a run had no wait split" if failed else
                                 f"every moved row and byte equals the oracle's ({sum(r['compared'] for r in rows_out)} fields)"))
    return 1 if failed else 0


def profile_line(path):
    """The profile's figures the exchanges are priced from, one line."""
    m = load(path).get("measured", {})
    p2p, ts, ce = m.get("p2p", {}), m.get("time_sharing") or {}, m.get("count_exchange") or {}
    return (f"Profile ({path}): point-to-point {p2p.get('latency_us', 0):.1f} us + bytes / "
            f"{p2p.get('bandwidth_GBps', 0):.2f} GB/s; count exchange {ce.get('latency_us', 0):.1f} us back to back over "
            f"{ce.get('ranks', 0)} ranks; sync wait "
            f"{m.get('sync_wait_per_compute', 0):.4f} s per s of compute and "
            f"{m.get('sync_wait_per_meeting_us', 0):.1f} us per meeting; time sharing: handoff "
            f"{ts.get('handoff_us', 0):.1f} us yielding, {ts.get('handoff_spin_us', 0):.1f} us spinning, compute "
            f"x{ts.get('compute_ratio', 0):.2f} at {ts.get('ranks_per_core', 0)} ranks per core." +
            "".join(f" Routed experts (tp{x['tp']}, rows {x['rows'][0]}-{x['rows'][-1]}): F {x['forward_us']:.1f} us + "
                    f"{x['forward_ns_per_row']:.1f} ns/row, I {x['input_grad_us']:.1f} us + "
                    f"{x['input_grad_ns_per_row']:.1f} ns/row, W {x['weight_grad_us']:.1f} us + "
                    f"{x['weight_grad_ns_per_row']:.1f} ns/row." for x in m.get("expert_rows", [])))


def ratio(m, p):
    return f"{m / p:.2f}" if m is not None and p > 0 else "-"


def print_markdown(rows_out):
    print("| ep | workload | fields checked | mismatches | imbalance | measured own ms | predicted own ms | own meas / pred | "
          "measured wait ms | predicted wait ms (peers + imbalance) | measured total ms | predicted total ms | "
          "total meas / pred | per-round totals ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows_out:
        m, p = r["measured_ms"], r["predicted_ms"]
        f = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        spread = " ".join(f"{x:.3f}" for x in r["measured_rounds_total_ms"]) or "-"
        print(f"| {r['ep']} | {r['workload']} | {r['compared']} | {r['mismatches']} | {r['imbalance']:.3f} | "
              f"{f(m['own'])} | {p['own']:.3f} | {ratio(m['own'], p['own'])} | {f(m['wait'])} | "
              f"{p['wait']:.3f} ({p['peer_wait']:.3f} + {p['imbalance_wait']:.3f}) | {f(m['total'])} | "
              f"{p['own'] + p['wait']:.3f} | {ratio(m['total'], p['own'] + p['wait'])} | {spread} |")
    if any(r["before_predicted_ms"] for r in rows_out):
        print()
        print("Before (--before's prediction on the same profile) and after, measured / predicted:")
        print()
        print("| ep | workload | measured wait ms | before: predicted wait ms (peers + imbalance) | before: wait meas / pred | "
              "after: predicted wait ms (peers + imbalance) | after: wait meas / pred | measured own ms | before: own "
              "meas / pred | after: own meas / pred |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows_out:
            m, p, b = r["measured_ms"], r["predicted_ms"], r["before_predicted_ms"]
            f = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
            print(f"| {r['ep']} | {r['workload']} | {f(m['wait'])} | {b['wait']:.3f} ({b['peer_wait']:.3f} + "
                  f"{b['imbalance_wait']:.3f}) | {ratio(m['wait'], b['wait'])} | {p['wait']:.3f} ({p['peer_wait']:.3f} + "
                  f"{p['imbalance_wait']:.3f}) | {ratio(m['wait'], p['wait'])} | {f(m['own'])} | "
                  f"{ratio(m['own'], b['own'])} | {ratio(m['own'], p['own'])} |")
    if any(r["oracle_extra_ms"] for r in rows_out):
        print()
        print("The busiest rank's extra expert time at the oracle's routing (profile's expert_rows fit), against the "
              "measured wait less the same ep's uniform cell's (ms per step):")
        print()
        print("| ep | workload | measured wait - uniform's | rows only (per row x rows) | rows + per-group intercept |")
        print("|---|---|---|---|---|")
        base = {r["ep"]: r["measured_ms"]["wait"] for r in rows_out if r["workload"] == "uniform"}
        for r in rows_out:
            w, b = r["measured_ms"]["wait"], base.get(r["ep"])
            extra = f"{w - b:.3f}" if w is not None and b is not None else "-"
            print(f"| {r['ep']} | {r['workload']} | {extra} | {r['oracle_extra_ms'][0]:.3f} | "
                  f"{r['oracle_extra_ms'][1]:.3f} |")
    print()
    print("Measured per kind, own / wait ms per step (medians):")
    print()
    print("| ep | workload | " + " | ".join(KINDS) + " | predicted: all-to-alls + meetings + count exchange ms |")
    print("|---|---|" + "---|" * len(KINDS) + "---|")
    for r in rows_out:
        m, p = r["measured_ms"], r["predicted_ms"]
        cells = " | ".join(f"{m[k + '_own']:.3f} / {m[k + '_wait']:.3f}" if m[k + "_own"] is not None else "-"
                           for k in KINDS)
        print(f"| {r['ep']} | {r['workload']} | {cells} | {p['all_to_all']:.3f} + {p['meetings']:.3f} + "
              f"{p['count_exchange']:.3f} |")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
