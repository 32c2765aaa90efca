#!/usr/bin/env bash
# The oversized demo (examples/oversized): one rank is refused before the world is built (bad input, exit 64) with
# the bytes it needs by category against device.memory_limit; the same config on pp 4 x tp 2 = 8 ranks trains and evaluates, and
# the largest per-rank peak the allocator measured stays under the cap. Usage: oversized.sh CLEAVE SRC_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
config=$src/examples/oversized/gpt_oversized.json

out=$("$cleave" train "$config" --set parallel.tensor_model_parallel_size=1 \
      --set parallel.pipeline_model_parallel_size=1 --set train.out_dir=single 2>&1)
status=$?
if [ $status -ne 64 ] || grep -q "comm backend" <<<"$out" || ! grep -Eq "memory: pp rank 0 needs about .*parameters .*optimizer_state .*activations .*device.memory_limit is 96.00 MiB" <<<"$out" || [ -e single ]; then
  echo "FAIL one rank: status $status, output: $out"; exit 1
fi
echo "ok   one rank refused: $out"

"${mpiexec[@]}" -n 8 "$cleave" train "$config" --set train.steps=3 --set train.eval_batches=2 \
    --set train.out_dir=eight > log.txt 2>&1 || { echo "FAIL 8 ranks:"; cat log.txt; exit 1; }
# Evaluation runs too (vocab-parallel loss through the forward-only schedule), under the same cap.
grep -q '"eval_loss"' <(tail -n 1 eight/metrics.jsonl) || { echo "FAIL 8 ranks: no eval_loss on the last row"; \
  tail -n 1 eight/metrics.jsonl; exit 1; }
peak=$(tail -n 1 eight/metrics.jsonl | sed 's/.*"peak_bytes": *\([0-9]*\).*/\1/')
cap=$((96 * 1024 * 1024))
if [ -z "$peak" ] || [ "$peak" -ge "$cap" ] || [ "$peak" -le 0 ]; then
  echo "FAIL 8 ranks: peak '$peak' not under the cap $cap"; cat log.txt; exit 1
fi
echo "ok   pp4 x tp2 trained 3 steps and evaluated; largest per-rank peak $peak B < cap $cap B"
