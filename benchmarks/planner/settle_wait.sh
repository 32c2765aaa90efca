#!/usr/bin/env bash
# ZeRO-2 per micro-batch's settle wait at 4 ranks on a 2-core machine (docs/planner.md, "More ranks than cores", "the
# settle waits for the peers' backward"): a fresh profile (`mpiexec -n 2 cleave profile --world 4`), the 5 plans below
# priced on it by two builds (before / after a change), then ROUNDS interleaved rounds of 8 traced steps a run
# (train.trace, as `cleave plan --trial` runs them); per run the median of steps 3-8, per plan the median over rounds.
# Controls: the pp2 dp2 plans and dp4 ZeRO-2 per step (the settle wait does not price them).
# Usage: benchmarks/planner/settle_wait.sh BEFORE_BIN AFTER_BIN OUT_DIR [ROUNDS] [CONFIG]
#   (default 5 rounds, examples/gpt_fortunes.json; OUT_DIR keeps the profile, predicted.txt and every run)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
before=$(realpath "$1"); after=$(realpath "$2"); out=$(realpath -m "$3"); rounds=${4:-5}
cfg=$(realpath "${5:-$root/examples/gpt_fortunes.json}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_WAIT_POLICY=passive
mkdir -p "$out"; cd "$out"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "profile $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
mpiexec --oversubscribe -n 2 "$after" profile "$cfg" --world 4 --out prof.json --repeats 3 --rounds 3 < /dev/null \
  > profile.log 2>&1 || { tail -20 profile.log; exit 1; }
grep -E "^(sync wait|time sharing)" profile.log || true
mb="--set batch.micro_batch_size=2 --set batch.global_batch_size=16"
dp4="--set parallel.data_parallel_size=4 --set parallel.pipeline_model_parallel_size=1"
pp2="--set parallel.data_parallel_size=2 --set parallel.pipeline_model_parallel_size=2"
pp2="$pp2 --set parallel.virtual_pipeline_stages=2 --set parallel.schedule=zb_v --set optimizer.zero_stage=1"
z2="$dp4 --set optimizer.zero_stage=2 --set optimizer.zero_reduce"
declare -A V=(
 [a_pp2_z1_sel]="$pp2 --set train.recompute=selective"
 [b_pp2_z1_none]="$pp2 --set train.recompute=none"
 [c_dp4_z2m_sel]="$z2=per_microbatch --set train.recompute=selective"
 [d_dp4_z2m_none]="$z2=per_microbatch --set train.recompute=none"
 [e_dp4_z2s_none]="$z2=per_step --set train.recompute=none" )
names=$(printf '%s\n' "${!V[@]}" | sort)
price() { "$1" simulate --config "$cfg" --world 4 --profile prof.json --json $mb ${V[$2]} 2>/dev/null |
  python3 -c "import json,sys; t=sys.stdin.read(); print(json.loads(t[t.index('{'):])['step_s'])"; }
for v in $names; do echo "$v $(price "$before" "$v") $(price "$after" "$v")"; done > predicted.txt
steps="--set train.steps=8 --set train.log_interval=8 --set train.eval_interval=0 --set train.eval_batches=0"
steps="$steps --set train.report=false --set checkpoint.save_final=false --set checkpoint.interval=0 --set train.trace=true"
for r in $(seq 1 "$rounds"); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for v in $names; do
    rm -rf "${v}_r$r"
    mpiexec --oversubscribe -n 4 "$after" train "$cfg" $mb $steps ${V[$v]} --set train.out_dir="${v}_r$r" > "${v}_r$r.log" 2>&1 \
      || { echo "failed: $v round $r"; tail -3 "${v}_r$r.log"; }
  done
done
echo "done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$rounds" << 'PY'
import json, statistics, sys
rounds = int(sys.argv[1])
print("| plan | pred ms before | after | measured median (rounds) | pred/meas before | after |")
print("|---|---:|---:|---|---:|---:|")
for line in open("predicted.txt"):
    v, b, a = line.split(); b, a = float(b) * 1e3, float(a) * 1e3
    meds = []
    for r in range(1, rounds + 1):
        try:
            st = [json.loads(l)["step_ms"] for l in open(f"{v}_r{r}/metrics.jsonl") if "step_ms" in l]
            meds.append(statistics.median(st[2:]))
        except (OSError, statistics.StatisticsError):
            pass
    m = statistics.median(meds) if meds else float("nan")
    print(f"| {v} | {b:.2f} | {a:.2f} | {m:.1f} ({', '.join(f'{x:.1f}' for x in meds)}) | {b / m:.2f} | {a / m:.2f} |")
PY
