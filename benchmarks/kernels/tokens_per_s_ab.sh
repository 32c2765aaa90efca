#!/usr/bin/env bash
# Training tokens/s of two cleave binaries, interleaved, on MODEL (small, large or llama: peer_models.sh) at
# PRECISION, CLEAVE_THREADS=2 and cleave's own OMP_WAIT_POLICY choice. Per round each binary trains STEPS steps in a
# fresh process (before, then after); its figure is the median step_ms of metrics.jsonl after WARMUP steps, as
# tokens/s. Prints each round and the medians over rounds, and after / before of the medians. Hold the build lock
# around it on a shared machine (flock /work/build.lock ...) so no build runs beside the timing.
# usage: benchmarks/kernels/tokens_per_s_ab.sh BEFORE AFTER small|large|llama fp32|bf16 [steps] [rounds] [warmup]
set -euo pipefail
before=$1 after=$2 model=$3 precision=$4 steps=${5:-15} rounds=${6:-3} warmup=${7:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/peer_models.sh"
peer_model_args "$model"
tokens_per_s() {  # binary -> median tokens/s of the steps after the warm-up
  local sets=()
  for a in "${args[@]}" model.vocab_size=256 train.steps=$steps train.eval_batches=0 train.log_interval=$steps \
           train.report=false checkpoint.save_final=false device.precision=$precision train.out_dir=$work/run; do
    sets+=(--set "$a")
  done
  rm -rf "$work/run"
  CLEAVE_THREADS=2 "$1" train "${sets[@]}" > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  python3 - "$work/run/metrics.jsonl" "$warmup" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "step_ms" in r and r["step"] > int(sys.argv[2])]
ms = statistics.median(r["step_ms"] for r in rows)
print(f"{rows[0]['tokens_per_s'] * rows[0]['step_ms'] / ms:.0f}")
PY
}
echo "model $model $precision: tokens/s (median of steps $((warmup + 1))-$steps), before / after, $rounds rounds"
b_all=() a_all=()
for ((r = 1; r <= rounds; ++r)); do
  b=$(tokens_per_s "$before"); a=$(tokens_per_s "$after")
  b_all+=("$b"); a_all+=("$a")
  echo "round $r $b $a"
done
python3 -c "
import statistics, sys
b = [float(v) for v in '${b_all[*]}'.split()]; a = [float(v) for v in '${a_all[*]}'.split()]
print(f'median {statistics.median(b):.0f} {statistics.median(a):.0f} after/before {statistics.median(a) / statistics.median(b):.3f}')
"
