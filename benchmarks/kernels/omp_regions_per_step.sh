#!/usr/bin/env bash
# OpenMP team creations per training step of a cleave binary (issue 39), counted with omp_region_count.c:
# `cleave train` of MODEL (small: the peer GPT d 256, 4 layers, T 64, batch 16; llama: the Llama example's model,
# as benchmarks/peers/cpu_train_bench.py builds them) at PRECISION for 5 and for 15 steps, CLEAVE_THREADS=2;
# prints (calls in 15 steps - calls in 5 steps) / 10 in total and per region body, most first.
# usage: benchmarks/kernels/omp_regions_per_step.sh CLEAVE_BINARY small|llama fp32|bf16 [top N rows]
set -euo pipefail
cleave=$1 model=$2 precision=$3 top=${4:-12}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -shared -fPIC -o "$work/count.so" "$here/omp_region_count.c" -ldl
source "$(dirname "$0")/peer_models.sh"
peer_model_args "$model"
for steps in 5 15; do
  sets=()
  for a in "${args[@]}" model.vocab_size=256 train.steps=$steps train.eval_batches=0 train.log_interval=$steps \
           train.report=false checkpoint.save_final=false device.precision=$precision train.out_dir=$work/run$steps; do
    sets+=(--set "$a")
  done
  OMP_REGION_COUNT_OUT=$work/raw$steps CLEAVE_THREADS=2 LD_PRELOAD=$work/count.so "$cleave" train "${sets[@]}" \
      > "$work/log$steps" 2>&1 || { cat "$work/log$steps" >&2; exit 1; }
  # One report per process that exits (cleave's re-exec, runtime_env.cpp, replaces its image without one); keep the
  # last report.
  awk '{print n+0, $0} / total$/ {n++}' "$work/raw$steps" > "$work/tagged$steps"
  last=$(awk '{print $1}' "$work/tagged$steps" | sort -n | tail -1)
  awk -v k="$last" '$1 == k && $NF != "total" {print $2, $3, $4}' "$work/tagged$steps" > "$work/count$steps"
  "$here/omp_region_names.sh" "$work/count$steps" > "$work/named$steps"
done
python3 - "$work/named5" "$work/named15" "$model" "$precision" "$top" <<'PY'
import collections, sys
def read(p):
    d = collections.Counter()
    for line in open(p):
        calls, name = line.split(" ", 1)
        d[name.strip()] += int(calls)
    return d
a, b = read(sys.argv[1]), read(sys.argv[2])
per = {k: (b[k] - a.get(k, 0)) / 10 for k in set(a) | set(b)}
print(f"{sys.argv[3]} {sys.argv[4]}: {sum(per.values()):.1f} OpenMP regions per step")
for k, v in sorted(per.items(), key=lambda kv: -kv[1])[: int(sys.argv[5])]:
    if v: print(f"  {v:8.1f}  {k}")
PY
