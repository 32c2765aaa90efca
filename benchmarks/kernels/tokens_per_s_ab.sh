#!/usr/bin/env bash
# Training tokens/s of two cleave binaries, interleaved, on MODEL (small, large or llama: peer_models.sh) at
# PRECISION, CLEAVE_THREADS=2 and cleave's own OMP_WAIT_POLICY choice. Per round each binary trains STEPS steps in a
# fresh process, the order alternating (odd rounds before first, even rounds after first: a loaded machine favours
# whichever runs first in a round, so a fixed order biased the ratio); its figure is the median step_ms of
# metrics.jsonl after WARMUP steps, as tokens/s. Prints each round with its order, the medians per binary over all
# rounds (both orders) with after / before of them, and the medians per order (their gap is the order's bias). Give an
# even ROUNDS so each order runs as often. Hold the build lock around it on a shared machine (flock /work/build.lock
# ...) so no build runs beside the timing. Self-test: tests/scripts/tokens_per_s_ab_selftest.sh.
# usage: benchmarks/kernels/tokens_per_s_ab.sh BEFORE AFTER small|large|llama fp32|bf16 [steps] [rounds] [warmup]
set -euo pipefail
before=$1 after=$2 model=$3 precision=$4 steps=${5:-15} rounds=${6:-4} warmup=${7:-3}
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
echo "model $model $precision: tokens/s (median of steps $((warmup + 1))-$steps), before / after, $rounds rounds, the order alternating"
b_all=() a_all=() first=()
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2 == 1)); then
    b=$(tokens_per_s "$before"); a=$(tokens_per_s "$after"); first+=(before)
  else
    a=$(tokens_per_s "$after"); b=$(tokens_per_s "$before"); first+=(after)
  fi
  b_all+=("$b"); a_all+=("$a")
  echo "round $r ${first[-1]} first $b $a"
done
python3 - "${b_all[*]}" "${a_all[*]}" "${first[*]}" <<'PY'
import statistics, sys
b, a = ([float(v) for v in arg.split()] for arg in sys.argv[1:3])
first = sys.argv[3].split()
mb, ma = statistics.median(b), statistics.median(a)
print(f"median before {mb:.0f} after {ma:.0f} after/before {ma / mb:.3f} (all {len(b)} rounds, both orders)")
for order in ("before", "after"):
    rounds = [i for i, f in enumerate(first) if f == order]
    if rounds:
        ob, oa = statistics.median(b[i] for i in rounds), statistics.median(a[i] for i in rounds)
        print(f"  {order} first: before {ob:.0f} after {oa:.0f} after/before {oa / ob:.3f} ({len(rounds)} rounds)")
PY
