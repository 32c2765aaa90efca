#!/usr/bin/env bash
# OpenMP wait policy on the small GPT of the peer comparison (d_model 256, 4 layers, 8 heads, T 64, batch 16,
# synthetic data) at 1 rank x 2 threads: median tokens/s and ms/step from metrics.jsonl after 5 warm-up steps,
# for OMP_WAIT_POLICY=passive, =active and libgomp's default (set but empty: spin about 300,000 iterations, then
# sleep) in alternation (ROUNDS rounds, so drift hits all alike), and the policy cleave chooses by itself
# (engine/train/threads.hpp choose_omp_wait_policy). Prints the CPU and the
# BLAS kernels cleave reports. Results: benchmarks/train/RESULTS-2026-11-28-wait-policy.md.
#
#   benchmarks/train/wait_policy.sh BUILD_DIR [ROUNDS]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [ROUNDS]}
rounds=${2:-3}
cleave=$build/bin/cleave
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(--set model.d_model=256 --set model.n_layers=4 --set model.n_heads=8 --set model.seq_len=64
      --set batch.global_batch_size=16 --set batch.micro_batch_size=16 --set train.steps=35
      --set train.eval_batches=0 --set train.log_interval=35 --set train.report=false)

median_of() {  # median of a metrics.jsonl field over rows after warm-up
  python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]
print(f'{statistics.median(r[sys.argv[2]] for r in rows):.1f}')" "$1" "$2"
}

"$cleave" version | sed -n '2,3p'
printf '%-8s %-10s %12s %10s\n' round policy tokens/s ms/step
for round in $(seq 1 "$rounds"); do
  for policy in passive active default chosen; do
    out=$work/$policy-$round
    if [[ $policy == chosen ]]; then
      env -u OMP_WAIT_POLICY CLEAVE_THREADS=2 "$cleave" train "${args[@]}" --set train.out_dir="$out" 2>"$out.log"
      policy="chosen:$(grep -m 1 -o 'OMP_WAIT_POLICY=[a-z]*' "$out.log" | cut -d= -f2)"
    elif [[ $policy == default ]]; then
      OMP_WAIT_POLICY= CLEAVE_THREADS=2 "$cleave" train "${args[@]}" --set train.out_dir="$out" 2>/dev/null
    else
      OMP_WAIT_POLICY=$policy CLEAVE_THREADS=2 "$cleave" train "${args[@]}" --set train.out_dir="$out" 2>/dev/null
    fi
    printf '%-8s %-10s %12s %10s\n' "$round" "$policy" "$(median_of "$out/metrics.jsonl" tokens_per_s)" \
      "$(median_of "$out/metrics.jsonl" step_ms)"
  done
done
