#!/usr/bin/env bash
# Data-parallel step time and ZeRO-1 optimizer-state bytes, measured with the real CLI.
#
#   benchmarks/dp/dp_step_bench.sh BUILD_DIR [CONFIG] [REPEATS] [STEPS]
#   (defaults: examples/gpt_fortunes.json, 5 repeats, 30 steps)
#
# Runs `cleave train CONFIG` at the config's global batch as
#   dp1         1 rank (the config's micro-batch, gradient accumulation makes up the global batch)
#   dp2         mpirun -np 2, default parallel.dp_bucket_mb
#   dp2_b1      mpirun -np 2, 1 MiB buckets (several buckets started during the backward)
#   dp2_zero1   mpirun -np 2, optimizer.zero_stage=1
#   dp1_det     dp1 with train.deterministic=true (canonical-order sums, shape-sliced GEMMs)
#   dp2_det     dp2 with train.deterministic=true; its per-step losses must equal dp1_det's bit for bit
# interleaved REPEATS times (so machine load drifts hit every variant alike). Each run's figure is the
# median step_ms of metrics.jsonl without the first 3 (warm-up) steps; the table shows the median, min and
# max of those over the repeats, and the ratio of medians to dp1. Both layouts run on the same cores: the
# CLI sizes each rank's thread pool to the node, so dp1 uses all cores in one process and dp2 splits them.
# Optimizer-state bytes come from the "data parallel:" line each dp rank 0 logs (the allocator's
# kOptimizerState counter for ZeRO-1, the unsharded size for plain dp).
#
# Environment: MPIRUN (default mpirun), MPIRUN_FLAGS (default: --oversubscribe --mca btl self,vader
# --mca mpi_yield_when_idle 1). As root, export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [CONFIG] [REPEATS] [STEPS]" >&2
  exit 2
fi
build=$1
config=${2:-examples/gpt_fortunes.json}
repeats=${3:-5}
steps=${4:-30}
cleave=$build/bin/cleave
[[ -x $cleave ]] || { echo "error: $cleave not found; build it: cmake --build $build --target cleave" >&2; exit 1; }
[[ -f $config ]] || { echo "error: config $config not found" >&2; exit 1; }
mpirun=${MPIRUN:-mpirun}
read -r -a mpi_flags <<< "${MPIRUN_FLAGS:---oversubscribe --mca btl self,vader --mca mpi_yield_when_idle 1}"
export OMP_WAIT_POLICY=passive OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set "train.steps=$steps" --set train.eval_batches=0 --set train.log_interval=1000)

run() {  # name ranks [--set ...]
  local name=$1 ranks=$2 rep=$3
  shift 3
  local out=$tmp/$name.$rep
  if [[ $ranks -eq 1 ]]; then
    "$cleave" train "$config" "${common[@]}" --set "train.out_dir=$out" "$@" > "$out.log" 2>&1
  else
    "$mpirun" -np "$ranks" "${mpi_flags[@]}" "$cleave" train "$config" "${common[@]}" --set "train.out_dir=$out" \
      "$@" > "$out.log" 2>&1
  fi || { echo "error: $name failed:" >&2; tail -5 "$out.log" >&2; exit 1; }
}

for rep in $(seq 1 "$repeats"); do
  run dp1 1 "$rep"
  run dp2 2 "$rep"
  run dp2_b1 2 "$rep" --set parallel.dp_bucket_mb=1
  run dp2_zero1 2 "$rep" --set optimizer.zero_stage=1
  run dp1_det 1 "$rep" --set train.deterministic=true
  run dp2_det 2 "$rep" --set train.deterministic=true
  echo "repeat $rep/$repeats done" >&2
done

python3 - "$tmp" "$repeats" "$config" <<'EOF'
import json, re, statistics, sys
tmp, repeats, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
names = ["dp1", "dp2", "dp2_b1", "dp2_zero1", "dp1_det", "dp2_det"]
medians, states, losses, curves = {}, {}, {}, {}
for n in names:
    medians[n] = []
    for rep in range(1, repeats + 1):
        rows = [json.loads(line) for line in open(f"{tmp}/{n}.{rep}/metrics.jsonl")]
        medians[n].append(statistics.median(r["step_ms"] for r in rows[3:] or rows))
        losses[n] = rows[-1]["loss"]
        curves.setdefault(n, []).append([r["loss"] for r in rows])
    log = open(f"{tmp}/{n}.1.log").read()
    m = re.search(r"data parallel: .*?(\d+) bucket\(s\).*?(ZeRO-1 optimizer state (\d+) B.*?unsharded (\d+) B|"
                  r"optimizer state unsharded (\d+) B)", log)
    states[n] = (m.group(1), m.group(3) or m.group(5)) if m else ("-", "-")
base = statistics.median(medians["dp1"])
print(f"config {config}, {repeats} repeats, median step_ms per run (steps 4..end)")
print(f"{'layout':<11} {'median ms':>10} {'min':>8} {'max':>8} {'vs dp1':>7} {'buckets':>8} {'opt state B/rank':>17}"
      f" {'final loss':>11}")
for n in names:
    med = statistics.median(medians[n])
    buckets, state = states[n]
    print(f"{n:<11} {med:>10.1f} {min(medians[n]):>8.1f} {max(medians[n]):>8.1f} {med / base:>7.2f} {buckets:>8}"
          f" {state:>17} {losses[n]:>11.4f}")
    print(json.dumps({"bench": "dp_step", "layout": n, "median_step_ms": med, "runs": medians[n],
                      "opt_state_bytes_per_rank": state, "final_loss": losses[n]}))
same = all(c == curves["dp1_det"][0] for c in curves["dp1_det"] + curves["dp2_det"])
print(f"deterministic: dp2_det per-step losses {'==' if same else '!='} dp1_det's over {len(curves['dp1_det'][0])}"
      f" steps and {repeats} repeats (bit for bit); cost of the mode: dp1 x"
      f"{statistics.median(medians['dp1_det']) / base:.2f}, dp2 x"
      f"{statistics.median(medians['dp2_det']) / statistics.median(medians['dp2']):.2f}")
if not same:
    sys.exit(1)
EOF
