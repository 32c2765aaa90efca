#!/usr/bin/env bash
# Training throughput of a tiny GPT (d_model 256, 4 layers, T 64, batch 16) on one CPU rank: median
# tokens/s and ms/step from metrics.jsonl after 5 warm-up steps, with OpenBLAS's own choice of core
# (CLEAVE_BLAS_CORETYPE=keep), with cleave's start-up correction of it (the default, docs/ops.md) and with
# OPENBLAS_CORETYPE=SkylakeX (AVX-512, where the CPU has it). With --profile it also counts instructions
# with callgrind and prints the share spent inside sgemm (a proxy for the GEMM share of a step).
#
#   benchmarks/train/tiny_gpt.sh BUILD_DIR [--profile]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [--profile]}
profile=${2:-}
cleave=$build/bin/cleave
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(--set model.d_model=256 --set model.n_layers=4 --set model.n_heads=8 --set model.seq_len=64
      --set batch.global_batch_size=16 --set batch.micro_batch_size=16 --set train.steps=35
      --set train.eval_batches=0 --set train.log_interval=35)

median_of() {  # field of metrics.jsonl rows after warm-up
  python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]
print(f'{statistics.median(r[sys.argv[2]] for r in rows):.1f}')" "$1" "$2"
}

printf '%-22s %12s %10s %s\n' "openblas core" "tokens/s" "ms/step" "peak"
for core in library cleave SkylakeX; do
  if [[ $core == SkylakeX ]] && ! grep -q avx512f /proc/cpuinfo; then continue; fi
  out=$work/$core
  if [[ $core == library ]]; then
    env -u OPENBLAS_CORETYPE CLEAVE_BLAS_CORETYPE=keep "$cleave" train "${args[@]}" --set train.out_dir="$out" 2>/dev/null
  elif [[ $core == cleave ]]; then env -u OPENBLAS_CORETYPE "$cleave" train "${args[@]}" --set train.out_dir="$out" 2>/dev/null
  else OPENBLAS_CORETYPE=$core "$cleave" train "${args[@]}" --set train.out_dir="$out" 2>/dev/null; fi
  printf '%-22s %12s %10s %s\n' "$core" "$(median_of "$out/metrics.jsonl" tokens_per_s)" \
    "$(median_of "$out/metrics.jsonl" step_ms)" "$(tail -n 1 "$out/metrics.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])') B"
done

if [[ $profile == --profile ]]; then
  command -v valgrind >/dev/null || { echo "valgrind not installed"; exit 0; }
  OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind \
    --callgrind-out-file="$work/cg.out" "$cleave" train "${args[@]}" --set train.steps=3 \
    --set train.out_dir="$work/cg" >/dev/null 2>&1
  callgrind_annotate --inclusive=yes "$work/cg.out" 2>/dev/null |
    awk '/PROGRAM TOTALS/ {total=$1} /Trainer::step/ && !s {s=$1} /sgemm_kernel/ && !g {g=$1}
         END {gsub(",","",total); gsub(",","",s); gsub(",","",g);
              printf "callgrind: sgemm kernels %.1f%% of all instructions, %.1f%% of the instructions inside Trainer::step\n", 100*g/total, 100*g/s}'
fi
