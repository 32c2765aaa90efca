#!/usr/bin/env bash
# examples/moe/config.json stays valid: the example (an 8-expert top-2 moe on the fortunes text, dp2) runs a few
# steps on 2 ranks under mpiexec exactly as written (only steps, evaluation and the output directory changed);
# every metrics.jsonl row carries the routing metrics (moe_aux_loss, moe_load_imbalance, one moe_tokens_e<i>
# per expert summing to the step's routed tokens), the loss is finite, and report.html draws "Expert load".
# Usage: moe_example.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
fail() { echo "FAIL $*"; exit 1; }
"${mpiexec[@]}" -n 2 "$cleave" train "$src/examples/moe/config.json" --set train.steps=4 --set train.eval_interval=2 \
  --set train.log_interval=1 --set train.out_dir=run > train.log 2>&1 || { cat train.log; fail "the example"; }
python3 - "$src/examples/moe/config.json" run/metrics.jsonl <<'PY' || fail "metrics"
import json, math, sys
cfg = json.load(open(sys.argv[1]))
m, b = cfg["model"], cfg["batch"]
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l and '"step"' in l]
assert len(rows) >= 4, f"{len(rows)} step rows"
routed = b["global_batch_size"] * m["seq_len"] * m["top_k"] * m["n_layers"]
for r in rows:
    assert math.isfinite(r["loss"]), r
    counts = [r[f"moe_tokens_e{i}"] for i in range(m["n_experts"])]
    assert sum(counts) == routed, f"step {r['step']}: expert tokens {counts} sum to {sum(counts)}, not {routed}"
    assert r["moe_load_imbalance"] >= 1.0 and r["moe_aux_loss"] > 0, r
print(f"ok   examples/moe/config.json: {len(rows)} steps on 2 ranks, loss {rows[0]['loss']:.3f} -> "
      f"{rows[-1]['loss']:.3f}, expert tokens {counts} (sum {routed}), imbalance {rows[-1]['moe_load_imbalance']:.2f}")
PY
grep -q "Expert load" run/report.html || fail "report.html draws no expert load"
echo "ok   report.html draws the expert load"
