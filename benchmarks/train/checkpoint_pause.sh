#!/usr/bin/env bash
# How long the step loop is blocked by a checkpoint save on the oversized demo (examples/oversized: tp2 x pp4 =
# 8 ranks, 164 MiB per checkpoint), saving every 2 of 20 steps (10 saves), evaluation off. Prints the median
# and range of the per-save figures from the `checkpoint:` log lines:
#   pause  "checkpoint: step N: the step loop paused X ms" (builds with background saves; the slowest rank)
#   commit "checkpoint: step N committed; the step loop waited Z ms for it" (background saves: the commit
#          inside the first step after every writer is done; the save's whole pause is pause + commit)
#   save   "checkpoint: step N saved to ... (..., Y ms, ...)" (rank 0, from the first write, or the snapshot,
#          to the commit; for the synchronous code before background saves this is the pause less two small
#          collectives)
#
#   benchmarks/train/checkpoint_pause.sh CLEAVE [--set KEY=VALUE ...]
set -euo pipefail
cleave=${1:?usage: $0 CLEAVE [--set KEY=VALUE ...]}
shift
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun -np 8 --oversubscribe --allow-run-as-root --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
  "$cleave" train "$src/examples/oversized/gpt_oversized.json" --set train.out_dir="$work/run" \
  --set checkpoint.interval=2 --set train.eval_batches=0 --set train.log_interval=100 "$@" > "$work/log" 2>&1 \
  || { cat "$work/log"; exit 1; }
python3 - "$work/log" "$work/run/metrics.jsonl" <<'PY'
import json, re, statistics, sys
log = open(sys.argv[1]).read()
steps = [json.loads(l)["step_ms"] for l in open(sys.argv[2])]
def show(name, values):
    if values:
        print(f"{name:6s} median {statistics.median(values):8.1f} ms  min {min(values):8.1f}  max {max(values):8.1f}  ({len(values)} saves)")
show("pause", [float(x) for x in re.findall(r"the step loop paused ([0-9.]+) ms", log)])
commits = [float(x) for x in re.findall(r"committed; the step loop waited ([0-9.]+) ms", log)]
show("commit", commits)
show("save", [float(x) for x in re.findall(r"saved to \S+ \([^,]*, ([0-9.]+) ms", log)])
print(f"step   median {statistics.median(steps):8.1f} ms  ({len(steps)} steps)")
PY
