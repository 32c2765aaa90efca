#!/usr/bin/env bash
# The moe block's routed experts priced launch by launch (issue 33 part 5; docs/planner.md, "The step, term by term",
# and "Expert parallelism"): the same configs simulated by two builds, before and after, on the shipped roofline
# profiles, each row the predicted step and the busiest pp rank's compute terms (ms per step). A cost model, not a
# timing: the output is deterministic and needs no lock. Configs: benchmarks/planner/moe_expert_gemms/*.json
# (Mixtral 8x7B at tp2 pp4 dp8 ep8, Qwen3-30B-A3B at pp2 dp4 ep4, each also at ep 1) and examples/moe/config.json.
# Memory is not what this compares: every run without a cap (--memory-limit 0; the ep1 rows need more than 80 GiB).
# Usage: benchmarks/planner/moe_expert_gemms.sh BEFORE_CLEAVE AFTER_CLEAVE
set -euo pipefail
before=$1
after=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/benchmarks/planner/moe_expert_gemms"
row() {  # name config world profile [--set ...]
  local name=$1 config=$2 world=$3 profile=$4
  shift 4
  for bin in "$before" "$after"; do
    "$bin" simulate --config "$config" --world "$world" --profile "$root/profiles/$profile" --json --memory-limit 0 "$@" 2>/dev/null
  done | python3 -c '
import json, sys
name = sys.argv[1]
runs = [json.loads(line) for line in sys.stdin.read().replace("}\n{", "}\x00{").split("\x00")]
def terms(j):
    b = j["breakdown_s"]
    return [1e3 * j["step_s"]] + [1e3 * b[t] for t in ("forward", "input_grad", "weight_grad", "recompute", "elementwise", "kernel_launch")]
a, b = terms(runs[0]), terms(runs[1])
cells = " | ".join(f"{x:.1f} -> {y:.1f}" for x, y in zip(a, b))
layout = runs[1]["layout"]
print(f"| {name} | {layout} | {cells} | {b[0] / a[0]:.3f} |")
' "$name"
}
echo "| run | layout | step ms | forward | input_grad | weight_grad | recompute | elementwise | kernel_launch | after / before |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for profile in h100_sxm.json a100_80gb_sxm.json; do
  p=${profile%%_*}
  row "Mixtral 8x7B, $p" "$here/mixtral_8x7b.json" 64 "$profile"
  row "Mixtral 8x7B ep1, $p" "$here/mixtral_8x7b.json" 64 "$profile" --set parallel.expert_model_parallel_size=1
  row "Mixtral 8x7B ep8 imbalance 1.5, $p" "$here/mixtral_8x7b.json" 64 "$profile" --ep-imbalance 1.5
  row "Qwen3-30B-A3B, $p" "$here/qwen3_30b_a3b.json" 8 "$profile"
  row "Qwen3-30B-A3B ep1, $p" "$here/qwen3_30b_a3b.json" 8 "$profile" --set parallel.expert_model_parallel_size=1
  row "examples/moe, $p" "$root/examples/moe/config.json" 2 "$profile"
done
