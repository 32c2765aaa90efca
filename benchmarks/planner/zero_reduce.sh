#!/usr/bin/env bash
# ZeRO 0-3 on the oversized demo's model, gradients reduce-scattered per micro-batch or once per step
# (optimizer.zero_reduce), at dp2 and dp4: per rank the allocator's gradient peak and total peak (run.json
# peak_bytes) beside the memory plan's (estimate_bytes), and the step time.
#
# Model and batch: examples/oversized/gpt_oversized.json as shipped (GPT d384, 8 layers, T 128, 14.3 M
# parameters, tied; AdamW; global batch 16, micro-batch 2: 4 micro-batches per replica at dp2, 2 at dp4), laid out
# as tp1 pp1 dpN (the whole model on each replica), device.memory_limit lifted, no evaluation, checkpoint or
# report. ZeRO-2 per micro-batch twice: with the default 25 MiB buckets (3 blocks each) and with
# parallel.dp_bucket_mb=7 (one 6.77 MiB transformer block each), since its peak is the shards plus two buckets.
# dp4 puts 4 ranks on this machine's cores; where there are fewer than 4 the script says so (oversubscribed:
# step times then measure the sharing more than the method).
# Step time: the median step_ms of steps 2..STEPS (metrics.jsonl); runs are sequential, not interleaved.
#
# Usage: benchmarks/planner/zero_reduce.sh [BUILD_DIR] [STEPS]   (about 3 minutes on 2 cores with 6 steps)
set -uo pipefail
build=${1:-build}; steps=${2:-6}
root=$(cd "$(dirname "$0")/../.." && pwd)
cleave="$root/$build/bin/cleave"
config="$root/examples/oversized/gpt_oversized.json"
[ -x "$cleave" ] || { echo "no $cleave: build the cleave target first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=()
[ -r /usr/share/games/fortunes/cookie ] || data=(--set data.type=synthetic --set data.path=)
common=(--set device.memory_limit=0 --set train.steps="$steps" --set train.log_interval=1
        --set train.eval_interval=0 --set train.eval_batches=0 --set checkpoint.save_final=false
        --set train.report=false --set parallel.tensor_model_parallel_size=1
        --set parallel.pipeline_model_parallel_size=1 "${data[@]}")

runs=()
run() {  # name ranks --set ...
  local name=$1 ranks=$2; shift 2
  local over=()
  if [ "$ranks" -gt "$(nproc)" ]; then
    over=(--oversubscribe)
    echo "note: $name puts $ranks ranks on $(nproc) cores (oversubscribed)"
  fi
  local start=$SECONDS
  if mpiexec -n "$ranks" "${over[@]}" "$cleave" train "$config" "${common[@]}" "$@" \
       --set parallel.data_parallel_size="$ranks" --set train.out_dir="$work/$name" < /dev/null > "$work/$name.log" 2>&1; then
    echo "$name: trained $steps steps in $((SECONDS - start)) s"
    runs+=("$name")
  else
    echo "$name: FAILED ($(grep -m1 -E 'error|what\(\)' "$work/$name.log" || tail -1 "$work/$name.log"))"
  fi
}

echo "cleave zero_reduce | $(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $config, $steps steps each"
for dp in 2 4; do
  run "dp${dp}_zero0" "$dp" --set optimizer.zero_stage=0
  run "dp${dp}_zero1" "$dp" --set optimizer.zero_stage=1
  for z in 2 3; do
    for form in per_microbatch per_step; do
      run "dp${dp}_zero${z}_${form}" "$dp" --set optimizer.zero_stage=$z --set optimizer.zero_reduce=$form
    done
  done
  run "dp${dp}_zero2_per_microbatch_7MiB" "$dp" --set optimizer.zero_stage=2 \
      --set optimizer.zero_reduce=per_microbatch --set parallel.dp_bucket_mb=7
done

python3 - "$work" "${runs[@]}" << 'PY'
import json, os, statistics, sys
work, names = sys.argv[1], sys.argv[2:]
mib = lambda b: f"{b / 2**20:7.2f}"
print("\nPer rank (the largest over ranks): measured (allocator) | memory plan, MiB; step time median of steps 2..")
print(f"{'run':34} {'gradient peak':>17} {'total peak':>17} {'grad/zero0':>10} {'total/zero0':>11} {'step ms':>8}")
base = {}
for name in names:
    run = json.load(open(os.path.join(work, name, "run.json")))
    cats = run["categories"]
    g = cats.index("gradients")
    grad = max(r["peak_bytes"][g] for r in run["ranks"])
    grad_plan = max(r["estimate_bytes"][g] for r in run["ranks"])
    total = max(sum(r["peak_bytes"]) for r in run["ranks"])
    total_plan = max(sum(r["estimate_bytes"]) for r in run["ranks"])
    rows = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl")) if l.strip()]
    steps = [r["step_ms"] for r in rows if "step_ms" in r][1:]
    ms = statistics.median(steps) if steps else float("nan")
    dp = name.split("_")[0]
    if name.endswith("zero0"):
        base[dp] = (grad, total)
    bg, bt = base.get(dp, (grad, total))
    print(f"{name:34} {mib(grad)} |{mib(grad_plan)} {mib(total)} |{mib(total_plan)} {grad / bg:10.3f} "
          f"{total / bt - 1:+10.1%} {ms:8.1f}")
PY
