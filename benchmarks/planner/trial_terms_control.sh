#!/usr/bin/env bash
# Control for trial_terms.sh's rows: one model in two layouts, each traced 3 times, predicted rows from
# `simulate --config --explain` with the same profile. WORLD 4 (on 2 cores: oversubscribed): dp4 ZeRO 0 (no
# collective inside a compute span: the only one is REDUCE_GRAD) against cp2 dp2 ZeRO-3 (ring hops and parameter
# gathers inside F and B). WORLD 2 (one rank per core): dp2 ZeRO-1 against cp2 ZeRO-1 (the ring's hops inside F, B).
# Prints rank 0's F, B, REDUCE_GRAD and OPTIMIZER_STEP span sums per run (benchmarks/planner/RESULTS-trial-2026-11-28.md)
# and the time those spans blocked on collectives, per kind (the trace's wait_<kind>_us, layers/comm_wait.hpp).
# NAMES="tp2_zero1 cp2_zero1" picks other layouts (tp2_zero1: tp2 at world 2).
# Usage: benchmarks/planner/trial_terms_control.sh [BUILD_DIR] [CONFIG] [WORLD]; LOCK=/work/build.lock runs each
# step under the lock; ROUNDS (default 3) traced runs per layout.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cleave="$root/${1:-build}/bin/cleave"
cfg="$root/${2:-examples/gpt_fortunes.json}"; world=${3:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
locked() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; cd "$w"
locked mpiexec --oversubscribe -n 2 $cleave profile $cfg --world 4 --out prof.json --repeats 3 --rounds 2 < /dev/null > profile.log 2>&1
common=(--set train.steps=8 --set train.eval_interval=0 --set train.eval_batches=0 --set train.report=false
        --set checkpoint.save_final=false --set checkpoint.interval=0 --set train.trace=true --set train.log_interval=8)
declare -A layouts=(
  [dp4_zero0]="--set parallel.data_parallel_size=4 --set batch.micro_batch_size=4 --set optimizer.zero_stage=0"
  [cp2dp2_zero3]="--set parallel.context_parallel_size=2 --set parallel.data_parallel_size=2 --set batch.micro_batch_size=4 --set optimizer.zero_stage=3"
  [dp2_zero1]="--set parallel.data_parallel_size=2 --set batch.micro_batch_size=4 --set optimizer.zero_stage=1"
  [tp2_zero1]="--set parallel.tensor_model_parallel_size=2 --set parallel.data_parallel_size=1 --set batch.micro_batch_size=4 --set optimizer.zero_stage=1"
  [cp2_zero1]="--set parallel.context_parallel_size=2 --set parallel.data_parallel_size=1 --set batch.micro_batch_size=4 --set optimizer.zero_stage=1"
)
names="dp4_zero0 cp2dp2_zero3"; [ "$world" = 2 ] && names="dp2_zero1 cp2_zero1"
names=${NAMES:-$names}
for name in $names; do
  echo "== $name: ${layouts[$name]}"
  $cleave simulate --config $cfg --world $world --profile prof.json --explain ${layouts[$name]} 2>&1 | grep -E "^  (forward|input_grad|weight_grad|recompute|tensor_parallel|context_parallel|zero_gather|expert_all_to_all|data_parallel|optimizer|bubble|total) " || true
  for round in $(seq "${ROUNDS:-3}"); do
    locked mpiexec --oversubscribe -n $world $cleave train $cfg ${layouts[$name]} "${common[@]}" --set train.out_dir=$w/$name.$round < /dev/null > $name.$round.log 2>&1 || { tail -5 $name.$round.log; exit 1; }
    python3 - $w/$name.$round/trace.json << 'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0]
by = {}
for e in ev: by[e["cat"]] = by.get(e["cat"], 0) + e["dur"] / 1e3
t0 = min(e["ts"] for e in ev); t1 = max(e["ts"] + e["dur"] for e in ev)
waits = {}
for e in ev:
    for k, v in e.get("args", {}).items():
        if k.startswith("wait_"): waits[k[5:-3]] = waits.get(k[5:-3], 0) + v / 1e3
print("  measured rank 0: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(by.items())) + f", makespan {(t1 - t0) / 1e3:.3f} ms"
      + ("; of the spans, blocked on " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(waits.items())) if waits else ""))
PY
  done
done
