#!/usr/bin/env bash
# ZeRO stages side by side at dp2 (mpirun -np 2): step time.
#
# 1. Step time: the d256 x 4-layer GPT of before_after.sh (T 64, vocab 256, global batch 16, micro-batch 4, so 2
#    micro-batches per replica, AdamW, deterministic) under optimizer.zero_stage 0, 1, 2 and 3, runs interleaved
#    (0 1 2 3 0 1 2 3 ...) so drift on a shared machine hits all alike. Each run's figure is its median step_ms after
#    5 warm-up steps; the table gives the median over rounds and the ratio to stage 0. The first losses of the
#    stages are compared (deterministic mode: they must be the same bits).
# Memory per stage (and per lever) against the memory plan: benchmarks/planner/memory_levers.sh.
#
#   benchmarks/train/zero_stages.sh BUILD_DIR [ROUNDS=5] [STEPS=20]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-5}
steps=${3:-20}
cleave=$build/bin/cleave
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np 2 --oversubscribe --mca btl self,vader)
model=(--set model.type=gpt --set model.vocab_size=256 --set model.d_model=256 --set model.n_layers=4
       --set model.n_heads=4 --set model.seq_len=64 --set data.type=synthetic --set data.path= --set batch.global_batch_size=16
       --set batch.micro_batch_size=4 --set optimizer.type=adamw --set train.steps="$steps" --set train.eval_batches=0
       --set train.log_interval=1000 --set train.report=false --set checkpoint.save_final=false
       --set train.deterministic=true)
field() {  # metrics.jsonl: median step_ms after warm-up, or the first 3 losses
  python3 - "$@" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if sys.argv[2] == "losses":
    print(" ".join(f"{r['loss']:.9g}" for r in rows[:3]))
else:
    print(f"{statistics.median(r[sys.argv[2]] for r in rows[5:]):.2f}")
PY
}
declare -A times
for ((i = 0; i < rounds; ++i)); do
  for z in 0 1 2 3; do
    out=$work/t-$z-$i
    "${mpi[@]}" "$cleave" train "${model[@]}" --set optimizer.zero_stage=$z --set train.out_dir="$out" >/dev/null 2>&1
    times[$z]+="$(field "$out/metrics.jsonl" step_ms) "
  done
done
l0=$(field "$work/t-0-0/metrics.jsonl" losses)
for z in 1 2 3; do
  lz=$(field "$work/t-$z-0/metrics.jsonl" losses)
  [[ $lz == "$l0" ]] || echo "zero $z: first losses differ from zero 0: $lz | $l0"
done
echo "step time, dp2 (ms, median over $rounds rounds of each run's median step)"
python3 - "${times[0]}" "${times[1]}" "${times[2]}" "${times[3]}" <<'PY'
import statistics, sys
runs = [[float(x) for x in a.split()] for a in sys.argv[1:]]
base = statistics.median(runs[0])
print(f"{'zero':<5} {'ms':>8} {'/zero0':>7}   per round")
for z, r in enumerate(runs):
    m = statistics.median(r)
    print(f"{z:<5} {m:8.2f} {m / base:7.3f}   {' '.join(f'{x:.1f}' for x in r)}")
PY

