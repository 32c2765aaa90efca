#!/usr/bin/env bash
# The trainer's own ep memory plan takes the config's routing figures (parallel.ep_stash_imbalance,
# ep_peak_imbalance; docs/planner.md "Expert parallelism's memory"): a tiny moe at ep 2 on 2 ranks (E 4, k 2: the
# dropless bound 2), its routing forced uniformly random (far below 1.5 on every rank), planned first under a cap it
# cannot meet (1 KiB) with and without the figures 1.5, so each refusal names its plan's total; then under a
# device.memory_limit half way between the two totals it is refused (exit 64, before the world) without the figures
# and trains 2 steps with them, its allocator capped at that limit.
# Usage: ep_memory_key.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/mpi_script_setup.sh" "$@"  # cleave, mpiexec, $work (entered, removed on exit)
cat > moe.json <<'JSON'
{
  "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 64,
            "ffn_hidden_size": 64, "n_experts": 4, "top_k": 2, "forced_routing": "uniform"},
  "parallel": {"expert_model_parallel_size": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 4},
  "optimizer": {"type": "sgd", "lr": 0.05},
  "train": {"steps": 2, "eval_batches": 0},
  "data": {"type": "synthetic"}
}
JSON
figures=(--set parallel.ep_stash_imbalance=1.5 --set parallel.ep_peak_imbalance=1.5)
# The plan's total of pp rank 0 in MiB, from the refusal under a cap no plan meets.
planned_mib() {
  local out status
  out=$("${mpiexec[@]}" -n 2 "$cleave" train moe.json --set train.out_dir=never --set device.memory_limit=1KiB "$@" 2>&1)
  status=$?
  [ $status -eq 64 ] || { echo "$out" >&2; echo "FAIL under 1 KiB: exit $status, expected 64" >&2; return 1; }
  grep -oE 'pp rank 0 needs about [0-9.]+ MiB' <<<"$out" | head -n 1 | grep -oE '[0-9.]+ MiB' | cut -d' ' -f1
}
bound=$(planned_mib) || exit 1
keyed=$(planned_mib "${figures[@]}") || exit 1
[ -n "$bound" ] && [ -n "$keyed" ] || { echo "FAIL no plan total in the refusals ('$bound', '$keyed')"; exit 1; }
# The activations alone: 0.5 x 512 rows x (2 blocks' stash of 224 columns + one block's phase of 256) x 4 B = 0.69 MiB.
# Printed to 0.01 MiB: at least 0.67 apart.
awk -v b="$bound" -v k="$keyed" 'BEGIN { exit !(b - k > 0.665) }' ||
  { echo "FAIL the figures 1.5 plan $keyed MiB against the bound's $bound MiB (expected 0.69 MiB less)"; exit 1; }
cap=$(awk -v b="$bound" -v k="$keyed" 'BEGIN { printf "%d", (b + k) / 2 * 1048576 }')
"${mpiexec[@]}" -n 2 "$cleave" train moe.json --set train.out_dir=bare --set device.memory_limit=$cap > bare.log 2>&1
status=$?
if [ $status -ne 64 ] || ! grep -q "but device.memory_limit is" bare.log || grep -q "cleave: tp=" bare.log; then
  cat bare.log; echo "FAIL without the figures under $cap B: exit $status, expected 64 before the world"; exit 1
fi
"${mpiexec[@]}" -n 2 "$cleave" train moe.json --set train.out_dir=keyed --set device.memory_limit=$cap "${figures[@]}" \
    > keyed.log 2>&1 || { cat keyed.log; echo "FAIL with the figures under $cap B"; exit 1; }
[ -s keyed/metrics.jsonl ] || { cat keyed.log; echo "FAIL the run with the figures wrote no metrics"; exit 1; }
echo "ok   ep 2 under device.memory_limit $cap B (plans: $bound MiB at the bound, $keyed MiB at 1.5): refused" \
     "without parallel.ep_*_imbalance, trains with them"
