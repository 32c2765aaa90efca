#!/usr/bin/env bash
# Predicted against measured for CONFIG's dp2 plans at ZeRO 0, 1, 2 and 3 (tp1 pp1, 2 ranks, MICRO per micro-batch),
# priced with and without the profile's stream_stretch (docs/planner.md, "A step computed as one stream"): profiles
# the model under `mpiexec -n 2`, prints each plan's predicted step both ways, then trains the four plans in ROUNDS
# interleaved rounds of 8 steps with train.trace, and per run prints rank 0's traced F and B span sums, REDUCE_GRAD,
# OPTIMIZER_STEP and the makespan (the last step's timeline), beside the run's logged ms/step.
# KEEP=DIR keeps both profiles in DIR (to rank the plans on them: cleave plan --profile DIR/prof.json).
# Usage: benchmarks/planner/zero_stream.sh [BUILD_DIR] [CONFIG] [ROUNDS] [MICRO]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cleave="$root/${1:-build}/bin/cleave"
cfg=$(realpath "${2:-$root/examples/gpt_fortunes.json}"); rounds=${3:-3}; micro=${4:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
[ -n "${KEEP:-}" ] && KEEP=$(realpath -m "$KEEP")
w=$(mktemp -d); trap 'if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$w"/prof*.json "$KEEP"/; fi; rm -rf "$w"' EXIT; cd "$w"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
mpiexec --oversubscribe -n 2 "$cleave" profile "$cfg" --world 2 --out prof.json --repeats 3 --rounds 2 < /dev/null > profile.log 2>&1 \
  || { cat profile.log; exit 1; }
grep -E "^sync wait" profile.log
python3 -c "import json; p=json.load(open('prof.json')); p['measured'].pop('stream_stretch', None); json.dump(p, open('prof_without.json','w'))"
lay() { echo "--set parallel.data_parallel_size=2 --set batch.micro_batch_size=$micro --set optimizer.zero_stage=$1"; }
for z in 0 1 2 3; do
  for p in prof prof_without; do
    printf "zero %s predicted (%-12s): %s ms\n" "$z" "$p" "$("$cleave" simulate --config "$cfg" --world 2 --profile $p.json --explain $(lay $z) 2>&1 \
      | awk '/^  (forward|input_grad|weight_grad|total) /{printf "%s %s  ", $1, $2}')"
  done
done
common=(--set train.steps=8 --set train.eval_interval=0 --set train.eval_batches=0 --set train.report=false
        --set checkpoint.save_final=false --set checkpoint.interval=0 --set train.trace=true --set train.log_interval=1)
for r in $(seq "$rounds"); do
  for z in 0 1 2 3; do
    mpiexec --oversubscribe -n 2 "$cleave" train "$cfg" $(lay $z) "${common[@]}" --set train.out_dir="$w/z$z.$r" < /dev/null \
      > "z$z.$r.log" 2>&1 || { tail -5 "z$z.$r.log"; exit 1; }
    python3 - "$w/z$z.$r/trace.json" "z$z.$r.log" "$z" "$r" "$(cut -d' ' -f1 /proc/loadavg)" << 'PY'
import json, re, statistics, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0]
by = {}
for e in ev: by[e["cat"]] = by.get(e["cat"], 0) + e["dur"] / 1e3
span = (max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)) / 1e3
steps = [float(m) for m in re.findall(r"([0-9.]+) ms/step", open(sys.argv[2]).read())][2:]
print(f"round {sys.argv[4]} zero {sys.argv[3]}: median step {statistics.median(steps):.2f} ms (steps 3-8), traced makespan {span:.2f}; "
      + ", ".join(f"{k} {v:.2f}" for k, v in sorted(by.items())) + f" (load {sys.argv[5]})")
PY
  done
done
