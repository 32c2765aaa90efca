"""One `cleave train` of the MoE benchmarks under mpirun (one OpenMP thread per rank, passive waits, shared-memory
transport), its metrics.jsonl rows returned; a failed run ends the calling script with its command and output's tail.
Shared by imbalance_bench.py, overlap_bench.py and cp_count_bench.py, which differ only in the keys they set."""
import json
import os
import subprocess
import sys


def train_metrics(who, launcher, cleave, config, ranks, sets, out_dir):
    """Trains `config` on `ranks` ranks with each KEY=VALUE of `sets` (in order) and train.out_dir=out_dir."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = launcher.split() + ["-np", str(ranks), "--mca", "btl", "self,vader", cleave, "train", config]
    for k in list(sets) + [f"train.out_dir={out_dir}"]:
        cmd += ["--set", k]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{who}: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
