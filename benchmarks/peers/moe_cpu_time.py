#!/usr/bin/env python3
"""CPU and wall time of whole `cleave train` runs of a MoE model, two binaries interleaved (the code before and after
a change), and the oneDNN primitives each creates. Standard library only.

Each round runs every binary once per precision, in turn, the shared lock (--lock) held over a precision's rounds,
so no build runs beside them and load drift on a shared machine hits both alike; a run's figures are the child's user + system seconds (rusage) and its
wall seconds, start-up included (the same for both binaries). The models and their `--set` arguments are
moe_train_bench.py's (MODELS, cleave_args; imported without torch). With --count, one more untimed run per binary
and precision under ONEDNN_VERBOSE=2 counts oneDNN's primitive creations (`create:cache_miss` lines) and its cache
hits: the primitives the run's own cache (kernels/cpu/onednn_matmuls.hpp) asked oneDNN for.

    python3 benchmarks/peers/moe_cpu_time.py --before /tmp/cleave-before --after build/bin/cleave \
        --model example --steps 30 --rounds 3 --lock /work/build.lock --count

Results: benchmarks/peers/RESULTS-<date>-moe-cpu.md.
"""
import argparse
import ast
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_util import held  # noqa: E402


def bench_definitions():
    """MODELS, VOCAB, AUX and cleave_args from moe_train_bench.py, without importing torch."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe_train_bench.py")
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body if (isinstance(n, ast.Assign) and n.targets[0].id in ("MODELS", "VOCAB", "AUX"))
            or (isinstance(n, ast.FunctionDef) and n.name == "cleave_args")]
    space = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), space)
    return space["MODELS"], space["cleave_args"]


def run(binary, args, threads, env_extra=None, capture=False):
    """(user + system seconds, wall seconds, stderr text) of one `cleave train`; exits on failure."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CLEAVE_THREADS=str(threads), **(env_extra or {}))
        env.pop("OMP_WAIT_POLICY", None)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([binary, "train", *args, "--set", f"train.out_dir={os.path.join(tmp, 'run')}"], env=env,
                           stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            sys.exit(f"{binary} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return cpu, wall, (r.stdout or "") + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--model", default="example")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lock", default="")
    ap.add_argument("--count", action="store_true", help="also count oneDNN primitive creations (untimed runs)")
    a = ap.parse_args()
    models, cleave_args = bench_definitions()
    cfg = models[a.model]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | {os.cpu_count()} cpus | threads {a.threads}")
    print(f"command: {' '.join(sys.argv)}")
    binaries = {"before": a.before, "after": a.after}
    for precision in a.precisions.split(","):
        args = cleave_args(cfg, precision, a.steps)
        if a.count:
            for name, binary in binaries.items():
                _, _, text = run(binary, args, a.threads, {"ONEDNN_VERBOSE": "2", "DNNL_VERBOSE": "2"}, capture=True)
                misses = sum(1 for line in text.splitlines() if "create:cache_miss" in line)
                hits = sum(1 for line in text.splitlines() if "create:cache_hit" in line)
                print(f"{a.model} {precision} {name}: {misses} primitives created by oneDNN, {hits} from its cache, "
                      f"in {a.steps} steps", flush=True)
        cpu = {name: [] for name in binaries}
        wall = {name: [] for name in binaries}
        with held(a.lock):  # one hold for the precision's rounds (a minute or two)
            for rnd in range(a.rounds):
                for name, binary in binaries.items():
                    c, w, _ = run(binary, args, a.threads)
                    cpu[name].append(c)
                    wall[name].append(w)
                    print(f"round {rnd + 1} {a.model} {precision} {name:6s} cpu {c:7.2f} s  wall {w:6.2f} s",
                          flush=True)
                print(f"round {rnd + 1} {a.model} {precision} after/before: "
                      f"cpu {cpu['after'][-1] / cpu['before'][-1]:.3f}, wall {wall['after'][-1] / wall['before'][-1]:.3f}",
                      flush=True)
        ratios_cpu = [x / y for x, y in zip(cpu["after"], cpu["before"])]
        ratios_wall = [x / y for x, y in zip(wall["after"], wall["before"])]
        print(f"{a.model} {precision}: after/before median of rounds: cpu {statistics.median(ratios_cpu):.3f} "
              f"{[round(r, 3) for r in ratios_cpu]}, wall {statistics.median(ratios_wall):.3f} "
              f"{[round(r, 3) for r in ratios_wall]}", flush=True)


if __name__ == "__main__":
    main()
