#!/usr/bin/env bash
# bf16 `cleave verify`'s noise floor over seeds (benchmarks/verify/RESULTS-2026-11-30-b-verify-floor.md): for the
# default gpt (no config) and a llama of the same size (n_kv_heads 2), AdamW (the default), bf16, at cp 2 ring, cp 2
# all_to_all, tp 2 and pp 2, each seed: the floor, the tolerance the floor gives, the layout's largest difference as
# a fraction of movement (tensor), its ratio to that tolerance (above 1: the tensor passes only on the precision twin
# or not at all) and the verdict. Works with the one-twin report (before) and the twins' (after).
# Usage: verify_floor_seeds.sh CLEAVE TAG STEPS SEED...   (MPIEXEC: default mpiexec --oversubscribe)
# One line per run: tag model layout steps seed | exit | floor | tolerance | layout largest (tensor) | ratio | verdict
set -u
cleave=$(realpath "$1"); tag=$2; steps=$3
shift 3
seeds=("$@")
read -r -a mpiexec <<< "${MPIEXEC:-mpiexec --oversubscribe}"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for m in gpt llama; do
  case $m in
    gpt) model=() ;;
    llama) model=(--set model.type=llama --set model.n_kv_heads=2) ;;
  esac
  for lay in "cp2 2 parallel.context_parallel_size=2" \
             "cp2a2a 2 parallel.context_parallel_size=2 parallel.context_parallel_comm=all_to_all" \
             "tp2 2 parallel.tensor_model_parallel_size=2" "pp2 2 parallel.pipeline_model_parallel_size=2"; do
    set -- $lay
    name=$1 np=$2
    shift 2
    args=()
    for kv in "$@"; do args+=(--set "$kv"); done
    for seed in "${seeds[@]}"; do
      log=$out/run.log
      "${mpiexec[@]}" -n "$np" "$cleave" verify "${model[@]}" --steps "$steps" --set device.precision=bf16 \
        --set train.seed="$seed" --set train.out_dir="$out/run" "${args[@]}" > "$log" 2>&1
      rc=$?
      floor=$(grep -o "ends [0-9.e+-]* of a tensor\|the floor is their largest, [0-9.e+-]*" "$log" | grep -o '[0-9][0-9.e+-]*' | head -1)
      line=$(grep -o "[0-9.e+-]*, of its movement: the layout's largest is [0-9.e+-]* ([^)]*)" "$log" | head -1)
      tol=${line%%,*}
      layout=$(sed "s/.*the layout's largest is //" <<< "$line")
      ratio=$(awk -v l="${layout%% *}" -v t="$tol" 'BEGIN { if (t > 0) printf "%.2f", l / t; else print "-" }')
      echo "$tag $m $name $steps $seed | $rc | $floor | $tol | $layout | $ratio | $(grep -o 'PASS$\|FAIL$' "$log" | tail -1)"
    done
  done
done
