#!/usr/bin/env python3
"""The expert-parallel imbalance benchmark (issue 36 part 5): for each named routing workload
(model.forced_routing: uniform, zipf, one_expert, empty_rank:EP, moving_hot) at ep 2 and 4, train the moe
model of bench_moe.json on EP ranks (mpirun, world = ep, so dp = ep and one expert-dp replica), read what every
rank's dispatch moved from metrics.jsonl (moe_ep_rows_b<i>_s<s>_d<d>, moe_ep_bytes_...: per step, summed over
the micro-batches), and check it EQUALS what the oracle (oracle.py, independent of the engine) says the workload
must move; then put the measured all-to-all time per step (moe_ep_all_to_all_ms, when the run reports it)
beside the planner's prediction (`cleave simulate --config --json`: ep_all_to_all_s per moe block and
micro-batch, at --ep-imbalance equal to the workload's exact imbalance and at the default).

Exit status 1 on any count or byte mismatch (the oracle check is exact); timings are reported, not asserted.

  benchmarks/moe/imbalance_bench.py BUILD_DIR [--eps 2,4] [--workloads uniform,zipf,...] [--steps 4]
                                    [--rounds 1] [--smoke] [--markdown] [--launcher "mpirun --oversubscribe"]
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


def predicted(cleave, config, ep, imbalance):
    cmd = [cleave, "simulate", "--config", config, "--world", str(ep), "--json",
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
    runs = {cell: [] for cell in cells}  # cell -> [(wrong, compared, imbalances, per-round median ms)]
    failed = False
    for _ in range(a.rounds):  # interleaved: every cell once per round, so drift on the machine hits all alike
        for ep, workload in cells:
            with tempfile.TemporaryDirectory() as tmp:
                metrics = run_train(a.launcher, cleave, config, ep, workload, a.steps, os.path.join(tmp, "run"))
            wrong, compared, imbalances = check(metrics, cfg, ep, workload, micro_batches)
            failed = failed or bool(wrong)
            for w in wrong[:10]:
                print(f"MISMATCH ep{ep} {workload}: {w}", file=sys.stderr)
            measured = [r["moe_ep_all_to_all_ms"] for r in metrics[1:] if "moe_ep_all_to_all_ms" in r]
            runs[(ep, workload)].append((wrong, compared, imbalances,
                                         statistics.median(measured) if measured else None))
    rows_out = []
    for ep, workload in cells:
        cell = runs[(ep, workload)]
        exact = statistics.mean(cell[0][2])
        per_round = [c[3] for c in cell if c[3] is not None]
        per_step = cfg["model"]["n_layers"] * micro_batches  # moe blocks x micro-batches
        at_exact = predicted(cleave, config, ep, exact)["ep_all_to_all_s"] * per_step * 1e3
        at_default = predicted(cleave, config, ep, 0)
        rows_out.append({
            "ep": ep, "workload": workload, "steps": a.steps, "rounds": len(cell),
            "compared": sum(c[1] for c in cell), "mismatches": sum(len(c[0]) for c in cell), "imbalance": exact,
            "measured_ms": statistics.median(per_round) if per_round else None,
            "measured_rounds_ms": per_round,
            "predicted_ms": at_exact,
            "default_imbalance": at_default["ep_imbalance"],
            "predicted_default_ms": at_default["ep_all_to_all_s"] * per_step * 1e3,
        })
    if a.markdown:
        print("| ep | workload | fields checked | mismatches | imbalance (max/mean rows) | all-to-alls per step, measured ms (median over rounds) | per-round medians ms | measured / predicted | predicted ms at that imbalance | predicted ms at the default (f) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows_out:
            meas = f"{r['measured_ms']:.3f}" if r["measured_ms"] is not None else "-"
            spread = " ".join(f"{x:.3f}" for x in r["measured_rounds_ms"]) or "-"
            ratio = f"{r['measured_ms'] / r['predicted_ms']:.2f}" if r["measured_ms"] is not None else "-"
            print(f"| {r['ep']} | {r['workload']} | {r['compared']} | {r['mismatches']} | {r['imbalance']:.3f} | {meas} | "
                  f"{spread} | {ratio} | "
                  f"{r['predicted_ms']:.3f} | {r['predicted_default_ms']:.3f} ({r['default_imbalance']:.3f}) |")
    else:
        print(json.dumps(rows_out, indent=1))
    print("imbalance_bench: " + ("FAILED: moved rows differ from the oracle" if failed else
                                 f"every moved row and byte equals the oracle's ({sum(r['compared'] for r in rows_out)} fields)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
