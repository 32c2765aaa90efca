#!/usr/bin/env bash
# Training tokens/s of two ways of launching `cleave train` on one model, interleaved: two precisions, two
# OMP_WAIT_POLICY values, one rank x 2 threads against mpiexec -n 2, ... A and B are command prefixes ending in
# `cleave train` (and any extra --set of their own), evaluated by the shell, e.g.
#   'CLEAVE_THREADS=2 build/bin/cleave train --set device.precision=bf16'
#   'mpiexec -n 2 -x OMP_WAIT_POLICY=passive build/bin/cleave train @ --set batch.micro_batch_size=8'
# The model's config and keys go where the prefix has a lone @ (so keys after it override the model's), else at
# its end. MODEL is example (examples/gpt_fortunes.json, its own data) or small, large, llama (peer_models.sh, vocab 256).
# Per round each launch trains STEPS steps in a fresh run, the order alternating (odd rounds A first, even rounds B
# first: a loaded machine favours whichever runs first); its figure is the median step_ms of rank 0's metrics.jsonl
# after WARMUP steps, as tokens/s of the whole job. Prints each round, the medians over all rounds with B / A, and
# the medians per order. Give an even ROUNDS. Hold the build lock around it on a shared machine.
# usage: benchmarks/kernels/launch_ab.sh example|small|large|llama 'A' 'B' [steps] [rounds] [warmup]
set -euo pipefail
model=$1 launch_a=$2 launch_b=$3 steps=${4:-15} rounds=${5:-4} warmup=${6:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
config=()
if [[ $model == example ]]; then
  config=("$here/../../examples/gpt_fortunes.json")
  args=(train.eval_interval=0)
else
  source "$here/peer_models.sh"
  peer_model_args "$model"
  args+=(model.vocab_size=256 train.eval_batches=0)
fi
tokens_per_s() {  # launch prefix -> median tokens/s of the steps after the warm-up
  local sets=()
  for a in "${args[@]}" train.steps=$steps train.log_interval=$steps train.report=false checkpoint.save_final=false \
           train.out_dir=$work/run; do
    sets+=(--set "$a")
  done
  rm -rf "$work/run"
  local cmd=$1 model_args='"${config[@]}" "${sets[@]}"'
  if [[ $cmd == *' @ '* || $cmd == *' @' ]]; then cmd=${cmd/ @/ $model_args}; else cmd+=" $model_args"; fi
  eval "$cmd" > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  python3 - "$work/run/metrics.jsonl" "$warmup" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "step_ms" in r and r["step"] > int(sys.argv[2])]
ms = statistics.median(r["step_ms"] for r in rows)
print(f"{rows[0]['tokens_per_s'] * rows[0]['step_ms'] / ms:.0f}")
PY
}
echo "model $model: tokens/s (median of steps $((warmup + 1))-$steps), A / B, $rounds rounds, the order alternating"
echo "A: $launch_a"
echo "B: $launch_b"
a_all=() b_all=() first=()
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2 == 1)); then
    a=$(tokens_per_s "$launch_a"); b=$(tokens_per_s "$launch_b"); first+=(A)
  else
    b=$(tokens_per_s "$launch_b"); a=$(tokens_per_s "$launch_a"); first+=(B)
  fi
  a_all+=("$a"); b_all+=("$b")
  echo "round $r ${first[-1]} first $a $b"
done
python3 - "${a_all[*]}" "${b_all[*]}" "${first[*]}" <<'PY'
import statistics, sys
a, b = ([float(v) for v in arg.split()] for arg in sys.argv[1:3])
first = sys.argv[3].split()
ma, mb = statistics.median(a), statistics.median(b)
print(f"median A {ma:.0f} B {mb:.0f} B/A {mb / ma:.3f} (all {len(a)} rounds, both orders)")
for order in ("A", "B"):
    rounds = [i for i, f in enumerate(first) if f == order]
    if rounds:
        oa, ob = statistics.median(a[i] for i in rounds), statistics.median(b[i] for i in rounds)
        print(f"  {order} first: A {oa:.0f} B {ob:.0f} B/A {ob / oa:.3f} ({len(rounds)} rounds)")
PY
