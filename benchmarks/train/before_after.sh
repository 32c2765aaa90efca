#!/usr/bin/env bash
# Step time of two builds side by side: the d256 x 4-layer GPT (T 64, vocab 256, global batch 16) trained on
# one rank and at pp2 (1F1B, 4 micro-batches of 4, mpirun -np 2), runs of the two builds interleaved (A B A B
# ...) so drift on a shared machine hits both alike. Each run's figure is its median step_ms after 5 warm-up
# steps; the table gives per layout the median over rounds for A and B and the ratio B / A (below 1: B faster).
# Losses of the first steps are compared first: the builds must train the same model (same bits expected when
# nothing numerical changed; a difference is printed, not hidden).
#
#   benchmarks/train/before_after.sh BUILD_A BUILD_B [ROUNDS=5] [STEPS=25]
set -euo pipefail
a=${1:?usage: $0 BUILD_A BUILD_B [ROUNDS] [STEPS]}
b=${2:?usage: $0 BUILD_A BUILD_B [ROUNDS] [STEPS]}
rounds=${3:-5}
steps=${4:-25}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--set model.type=gpt --set model.vocab_size=256 --set model.d_model=256 --set model.n_layers=4
       --set model.n_heads=4 --set model.seq_len=64 --set data.type=synthetic --set data.path= --set batch.global_batch_size=16
       --set train.steps="$steps" --set train.eval_batches=0 --set train.log_interval=1000 --set train.report=false
       --set checkpoint.save_final=false --set train.deterministic=true)
run() {  # build layout out_dir
  local cleave=$1/bin/cleave layout=$2 out=$3
  if [[ $layout == pp1 ]]; then
    "$cleave" train "${model[@]}" --set batch.micro_batch_size=16 --set train.out_dir="$out" >/dev/null 2>&1
  else
    mpirun -np 2 --oversubscribe --mca btl self,vader "$cleave" train "${model[@]}" --set batch.micro_batch_size=4 \
      --set parallel.pipeline_model_parallel_size=2 --set parallel.schedule=1f1b --set train.out_dir="$out" \
      >/dev/null 2>&1
  fi
}
field() {  # metrics.jsonl field: median after warm-up, or the first N losses
  python3 - "$@" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if sys.argv[2] == "losses":
    print(" ".join(f"{r['loss']:.9g}" for r in rows[:3]))
else:
    print(f"{statistics.median(r[sys.argv[2]] for r in rows[5:]):.2f}")
PY
}
printf '%-6s %10s %10s %8s   %s\n' layout "A ms" "B ms" "B/A" "per-round A | B"
for layout in pp1 pp2; do
  ra=() rb=()
  for ((i = 0; i < rounds; ++i)); do
    run "$a" $layout "$work/a-$layout-$i"; ra+=("$(field "$work/a-$layout-$i/metrics.jsonl" step_ms)")
    run "$b" $layout "$work/b-$layout-$i"; rb+=("$(field "$work/b-$layout-$i/metrics.jsonl" step_ms)")
  done
  la=$(field "$work/a-$layout-0/metrics.jsonl" losses); lb=$(field "$work/b-$layout-0/metrics.jsonl" losses)
  [[ $la == "$lb" ]] || echo "$layout: first losses differ: A $la | B $lb"
  python3 - "$layout" "${ra[*]}" "${rb[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[2].split()]; b = [float(x) for x in sys.argv[3].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"{sys.argv[1]:<6} {ma:10.2f} {mb:10.2f} {mb / ma:8.3f}   {' '.join(f'{x:.1f}' for x in a)} | {' '.join(f'{x:.1f}' for x in b)}")
PY
done
