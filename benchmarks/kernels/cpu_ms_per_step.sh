#!/usr/bin/env bash
# CPU time per training step (all threads' task-clock, perf stat) of two cleave binaries, interleaved, on MODEL
# (small: the peer GPT d 256, 4 layers, T 64, batch 16; llama: the Llama example's model; as
# benchmarks/peers/cpu_train_bench.py builds them) at PRECISION, CLEAVE_THREADS=2. Per round and binary:
# (task-clock of a 25-step run - that of a 5-step run) / 20, which leaves start-up out. CPU time counts the work
# done, not the time waited for a core, so it moves less than wall time on a machine shared with other jobs
# (threads that sleep between regions under OMP_WAIT_POLICY=passive cost nothing here; spinning ones would).
# usage: benchmarks/kernels/cpu_ms_per_step.sh BEFORE AFTER small|llama fp32|bf16 [rounds]
set -euo pipefail
before=$1 after=$2 model=$3 precision=$4 rounds=${5:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/peer_models.sh"
peer_model_args "$model"
task_ms() {  # binary steps -> task-clock milliseconds of the whole run
  local sets=()
  for a in "${args[@]}" model.vocab_size=256 train.steps=$2 train.eval_batches=0 train.log_interval=$2 \
           train.report=false checkpoint.save_final=false device.precision=$precision train.out_dir=$work/run; do
    sets+=(--set "$a")
  done
  rm -rf "$work/run"
  CLEAVE_THREADS=2 perf stat -x, -e task-clock -o "$work/stat" "$1" train "${sets[@]}" > "$work/log" 2>&1 ||
      { cat "$work/log" >&2; exit 1; }
  awk -F, '$3 == "task-clock" {print $1}' "$work/stat"
}
echo "model $model $precision: CPU ms per step (all threads), before / after, $rounds rounds"
for ((r = 1; r <= rounds; ++r)); do
  line="round $r"
  for b in "$before" "$after"; do
    t5=$(task_ms "$b" 5); t25=$(task_ms "$b" 25)
    line+=$(python3 -c "print(f' {($t25 - $t5) / 20:8.2f}')")
  done
  echo "$line"
done
