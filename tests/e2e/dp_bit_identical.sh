#!/usr/bin/env bash
# Deterministic mode through the CLI: `cleave train` on one rank (all the node's threads) and under mpiexec
# with dp = 2 and dp = 4 (one thread per rank) at the same global and micro batch writes the same per-step
# losses to metrics.jsonl, to the last printed digit (shortest round-trip doubles), with AdamW and
# clipping on. Grad norms agree to 1e-12 (their squares are summed over other partitions).
# Usage: dp_bit_identical.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/mpi_script_setup.sh" "$@"  # cleave, mpiexec, $work (entered, removed on exit)
cat > tiny.json <<'JSON'
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 32},
  "batch": {"global_batch_size": 16, "micro_batch_size": 4},
  "optimizer": {"type": "adamw", "lr": 0.003, "grad_clip": 0.5, "warmup_steps": 2},
  "train": {"steps": 12, "seed": 7, "deterministic": true, "eval_batches": 0, "log_interval": 100},
  "data": {"type": "synthetic"}
}
JSON

run() {  # run NAME RANKS
  if [ "$2" -eq 1 ]; then
    "$cleave" train tiny.json --set train.out_dir="$1" > "$1.log" 2>&1
  else
    "${mpiexec[@]}" -n "$2" "$cleave" train tiny.json --set train.out_dir="$1" > "$1.log" 2>&1
  fi || { echo "FAIL $1:"; cat "$1.log"; exit 1; }
  sed 's/.*"loss":\([^,]*\),.*/\1/' "$1/metrics.jsonl" > "$1.losses"
  sed 's/.*"grad_norm":\([^,]*\),.*/\1/' "$1/metrics.jsonl" > "$1.norms"
}

run one 1
[ "$(wc -l < one.losses)" -eq 12 ] || { echo "FAIL: expected 12 steps"; cat one/metrics.jsonl; exit 1; }
for ranks in 2 4; do
  run "dp$ranks" "$ranks"
  if ! diff one.losses "dp$ranks.losses" > /dev/null; then
    echo "FAIL dp$ranks: per-step losses differ from one rank (one rank | dp$ranks):"
    paste one.losses "dp$ranks.losses"; exit 1
  fi
  if ! paste one.norms "dp$ranks.norms" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-12 * $1) exit 1 }'; then
    echo "FAIL dp$ranks: grad norms differ by more than 1e-12:"; paste one.norms "dp$ranks.norms"; exit 1
  fi
  echo "ok   dp$ranks: 12 losses bit-identical to one rank ($(head -n 1 one.losses) -> $(tail -n 1 one.losses))"
done
