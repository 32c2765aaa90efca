#!/usr/bin/env bash
# Whether two cleave binaries train identically: STEPS steps of MODEL (small, large or llama: peer_models.sh) at
# PRECISION with each, CLEAVE_THREADS=THREADS, and the loss and gradient norm of every step compared as printed in
# metrics.jsonl (the norm is the exact-sum norm over every gradient bit, so equal norms mean equal gradients to
# within a permutation of bits that no kernel change makes). Prints both columns; exits 1 on any difference.
# usage: benchmarks/kernels/same_steps.sh BEFORE AFTER small|large|llama fp32|bf16 [steps] [threads] [key=value...]
set -euo pipefail
before=$1 after=$2 model=$3 precision=$4 steps=${5:-4} threads=${6:-2}
shift $(( $# < 6 ? $# : 6 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/peer_models.sh"
peer_model_args "$model"
for b in before after; do
  sets=()
  for a in "${args[@]}" model.vocab_size=256 train.steps=$steps train.eval_batches=0 train.log_interval=1 \
           train.report=false checkpoint.save_final=false device.precision=$precision train.out_dir=$work/$b "$@"; do
    sets+=(--set "$a")
  done
  CLEAVE_THREADS=$threads "${!b}" train "${sets[@]}" > "$work/$b.log" 2>&1 || { cat "$work/$b.log" >&2; exit 1; }
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r: print(r.get("step"), repr(r["loss"]), repr(r.get("grad_norm")))' "$work/$b/metrics.jsonl" > "$work/$b.steps"
done
echo "$model $precision, $steps steps, $threads threads: step loss grad_norm (before | after)"
paste -d'|' "$work/before.steps" "$work/after.steps"
cmp -s "$work/before.steps" "$work/after.steps" && echo "identical" || { echo "DIFFERENT"; exit 1; }
