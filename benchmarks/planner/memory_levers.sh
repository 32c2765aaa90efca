#!/usr/bin/env bash
# The memory levers on the oversized demo's model (examples/oversized/gpt_oversized.json: GPT d384, 8 layers,
# 14.3 M parameters), measured against the memory plan: each lever trains STEPS steps and the allocator's peak
# per rank and category (run.json, written by the trainer: `peak_bytes`, with the memory plan's `estimate_bytes`
# for the same rank) is printed next to the plan's prediction, then the drop of each lever against its baseline,
# measured and predicted:
#   ZeRO 0 (baseline), 1, 2, 3 at dp2 (tp1 pp1, 2 ranks: the whole model on each replica);
#   sequence parallelism off (baseline) and on at tp2 (pp1 dp1, 2 ranks; micro-batch 4 so activations count).
# The demo's own layout (tp2 pp4, 8 ranks) would oversubscribe this 2-core machine four times over; these
# layouts use 2 ranks, one per core (more ranks than cores are run with --oversubscribe and the script says so).
# device.memory_limit is lifted (the demo's 96 MiB cap is what the levers are measured against, not a limit
# here); global batch 8, micro-batch 2 (4 under tp2), no evaluation, checkpoint or report.
# A lever the engine refuses or fails to train (ZeRO-3 before its runtime is in) is reported with the last line
# of its log and the memory plan's prediction (`cleave simulate --config`), and left out of the drops; the script
# still succeeds unless a baseline fails.
# Usage: benchmarks/planner/memory_levers.sh [BUILD_DIR] [STEPS]   (about a minute on 2 cores)
set -uo pipefail
build=${1:-build}; steps=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
cleave="$root/$build/bin/cleave"
config="$root/examples/oversized/gpt_oversized.json"
[ -x "$cleave" ] || { echo "no $cleave: build the cleave target first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=()
[ -r /usr/share/games/fortunes/cookie ] || data=(--set data.type=synthetic --set data.path=)
common=(--set device.memory_limit=0 --set batch.global_batch_size=8 --set train.steps="$steps"
        --set train.log_interval=1 --set train.eval_interval=0 --set train.eval_batches=0
        --set checkpoint.save_final=false --set train.report=false "${data[@]}")
dp2=(--set parallel.tensor_model_parallel_size=1 --set parallel.pipeline_model_parallel_size=1
     --set parallel.data_parallel_size=2 --set batch.micro_batch_size=2)
tp2=(--set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=1
     --set parallel.data_parallel_size=1 --set batch.micro_batch_size=4)

run() {  # name ranks --set ...
  local name=$1 ranks=$2; shift 2
  local over=()
  [ "$ranks" -le "$(nproc)" ] || { over=(--oversubscribe); echo "note: $name puts $ranks ranks on $(nproc) cores"; }
  local start=$SECONDS
  if mpiexec -n "$ranks" "${over[@]}" "$cleave" train "$config" "${common[@]}" "$@" --set train.out_dir="$work/$name" \
       < /dev/null > "$work/$name.log" 2>&1; then
    echo "$name: trained $steps steps in $((SECONDS - start)) s"
  else
    local why
    why=$(grep -m1 -E '^(error|terminate)|what\(\)' "$work/$name.log" || grep -vE '^\s*$|^-+$' "$work/$name.log" | tail -1)
    echo "$name: FAILED ($why)"
    rm -f "$work/$name/run.json"
    # The prediction alone (the memory plan does not depend on the profile; a shipped one avoids measuring).
    "$cleave" simulate --config "$config" --world "$ranks" --profile "$root/profiles/a100_80gb_sxm.json" \
      "${common[@]}" "$@" 2>&1 | grep -E "memory plan" | sed "s/^/  $name predicted: /" || true
  fi
}

echo "cleave memory levers | $(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $config, $steps steps each"
for zero in 0 1 2 3; do run "zero$zero" 2 "${dp2[@]}" --set optimizer.zero_stage="$zero"; done
run sp_off 2 "${tp2[@]}" --set parallel.sequence_parallel=false
run sp_on 2 "${tp2[@]}" --set parallel.sequence_parallel=true

python3 - "$work" << 'PY'
import json, os, sys
work = sys.argv[1]
def load(name):
    path = os.path.join(work, name, "run.json")
    return json.load(open(path)) if os.path.exists(path) else None
runs = {n: load(n) for n in ["zero0", "zero1", "zero2", "zero3", "sp_off", "sp_on"]}
mib = lambda b: f"{b / 2**20:8.2f}"
cats = next(r["categories"] for r in runs.values() if r)
print("\nPeak per rank and category: measured (allocator, run.json peak_bytes) | memory plan | measured / plan")
print(f"{'run':8} {'rank':>4} " + " ".join(f"{c[:13]:>27}" for c in cats) + f" {'total':>27}")
for name, r in runs.items():
    if not r:
        print(f"{name:8}  (no run.json: failed)")
        continue
    for rank in r["ranks"]:
        meas, plan = rank["peak_bytes"], rank["estimate_bytes"]
        cols = [(m, p) for m, p in zip(meas, plan)] + [(sum(meas), sum(plan))]
        print(f"{name:8} {rank['rank']:>4} " + " ".join(
            f"{mib(m)} |{mib(p)} | {m / p:5.2f}" if p else f"{mib(m)} |{mib(p)} |   -  " for m, p in cols))
print("\nDrop against the baseline, per rank (1 - lever / baseline; measured | predicted), MiB saved measured")
print(f"{'lever':8} {'vs':7} {'rank':>4} " + " ".join(f"{c[:13]:>17}" for c in cats) + f" {'total':>17} {'saved':>8}")
for lever, base in [("zero1", "zero0"), ("zero2", "zero0"), ("zero3", "zero0"), ("sp_on", "sp_off")]:
    if not runs[lever] or not runs[base]:
        print(f"{lever:8} {base:7}  (not measured)")
        continue
    for lr, br in zip(runs[lever]["ranks"], runs[base]["ranks"]):
        lm, lp, bm, bp = lr["peak_bytes"], lr["estimate_bytes"], br["peak_bytes"], br["estimate_bytes"]
        lm, lp, bm, bp = lm + [sum(lm)], lp + [sum(lp)], bm + [sum(bm)], bp + [sum(bp)]
        drop = lambda a, b: f"{1 - a / b:+6.1%}" if b else "   -  "
        print(f"{lever:8} {base:7} {lr['rank']:>4} " + " ".join(
            f"{drop(lm[i], bm[i])} |{drop(lp[i], bp[i])}" for i in range(len(lm))) + f" {mib(bm[-1] - lm[-1])}")
PY
[ -f "$work/zero0/run.json" ] && [ -f "$work/sp_off/run.json" ]
