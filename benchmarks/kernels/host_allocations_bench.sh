#!/usr/bin/env bash
# Wall time of `cleave train` on an example model, two binaries interleaved: ROUNDS rounds, each a hyperfine run of
# BEFORE then AFTER (one warm-up, RUNS counted runs each), so a drift of the shared machine hits both alike. STEPS
# training steps, no evaluation, report or checkpoint; the whole process is timed (start-up included, the same for
# both binaries). Prints each round's means and the after/before ratio, then the medians.
# usage: benchmarks/kernels/host_allocations_bench.sh BEFORE AFTER CONFIG.json [fp32|bf16] [steps] [rounds] [runs]
set -euo pipefail
before=$1 after=$2 config=$3 precision=${4:-fp32} steps=${5:-30} rounds=${6:-3} runs=${7:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sets="--set train.steps=$steps --set train.eval_interval=0 --set train.eval_batches=0 --set train.report=false"
sets+=" --set checkpoint.save_final=false --set train.log_interval=$steps --set device.precision=$precision"
sets+=" --set train.out_dir=$work/run"
ratios=()
for ((r = 1; r <= rounds; ++r)); do
  CLEAVE_THREADS=2 hyperfine -N --warmup 1 --runs "$runs" --prepare "rm -rf $work/run" \
      --export-json "$work/r$r.json" "$before train $config $sets" "$after train $config $sets" > /dev/null
  line=$(python3 - "$work/r$r.json" "$steps" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["results"]; steps = int(sys.argv[2])
b, a = res[0]["mean"], res[1]["mean"]
print(f"{b:.3f} {a:.3f} {steps / b:.2f} {steps / a:.2f} {a / b:.3f}")
PY
)
  echo "round $r: before ${line%% *} s, after $(echo "$line" | cut -d' ' -f2) s;" \
       "steps/s $(echo "$line" | cut -d' ' -f3) -> $(echo "$line" | cut -d' ' -f4); after/before $(echo "$line" | cut -d' ' -f5)"
  ratios+=("$line")
done
printf '%s\n' "${ratios[@]}" | python3 -c '
import sys, statistics as st
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
med = lambda i: st.median(r[i] for r in rows)
print(f"median: before {med(0):.3f} s ({med(2):.2f} steps/s), after {med(1):.3f} s ({med(3):.2f} steps/s), "
      f"after/before {med(4):.3f} (range {min(r[4] for r in rows):.3f}-{max(r[4] for r in rows):.3f})")'
