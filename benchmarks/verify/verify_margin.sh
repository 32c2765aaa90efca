#!/usr/bin/env bash
# bf16 `cleave verify`'s margin (benchmarks/verify/RESULTS-2026-11-30-verify-margin.md): the twin's noise floor and
# each layout's largest difference from one rank as a fraction of movement, for the default gpt (no config) and a
# llama of the same size (n_kv_heads 2), at cp 2 ring, cp 4 ring, cp 2 all_to_all, tp 2 and pp 2; AdamW (the
# default), bf16. One line per run: tag model layout | exit status | floor | layout's largest (tensor) | verdict.
# Usage: verify_margin.sh CLEAVE TAG [STEPS]   (MPIEXEC: default mpiexec --oversubscribe; logs in $PWD/TAG-*.log)
set -u
cleave=$(realpath "$1"); tag=$2; steps=${3:-3}
read -r -a mpiexec <<< "${MPIEXEC:-mpiexec --oversubscribe}"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for m in gpt llama; do
  case $m in
    gpt) model=() ;;
    llama) model=(--set model.type=llama --set model.n_kv_heads=2) ;;
  esac
  for lay in "cp2 2 parallel.context_parallel_size=2" "cp4 4 parallel.context_parallel_size=4" \
             "cp2a2a 2 parallel.context_parallel_size=2 parallel.context_parallel_comm=all_to_all" \
             "tp2 2 parallel.tensor_model_parallel_size=2" "pp2 2 parallel.pipeline_model_parallel_size=2"; do
    set -- $lay
    name=$1 np=$2
    shift 2
    args=()
    for kv in "$@"; do args+=(--set "$kv"); done
    log=$tag-$m-$name.log
    "${mpiexec[@]}" -n "$np" "$cleave" verify "${model[@]}" --steps "$steps" --set device.precision=bf16 \
      --set train.out_dir="$out" "${args[@]}" > "$log" 2>&1
    rc=$?
    floor=$(grep -o 'ends [0-9.e+-]* of a tensor' "$log" | awk '{print $2}')
    layout=$(grep -o "the layout's largest is [0-9.e+-]* ([^)]*)" "$log" | head -1 | sed "s/the layout's largest is //")
    echo "$tag $m $name | $rc | $floor | $layout | $(grep -o 'PASS\|FAIL' "$log" | tail -1)"
  done
done
