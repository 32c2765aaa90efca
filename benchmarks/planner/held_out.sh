#!/usr/bin/env bash
# Held-out published runs (issue 38 part 3): re-simulates every row of benchmarks/planner/held_out/*.tsv (Megatron-LM
# SC'21 Table 1, Megatron-Core's H100 weak-scaling table, the zero-bubble paper's Table 4, torchtitan's Llama 2 and
# Llama 3 on A100) with the run's own layout, schedule, batch, precision and recomputation through `cleave simulate
# --config` and the shipped profiles, and prints predicted, published and ratio per row, then the median and worst
# error.
# The driver and its formulas are benchmarks/planner/held_out.py; the tables cite their sources in '#' lines.
# Usage: benchmarks/planner/held_out.sh [BUILD_DIR] [held_out.py options: --smoke, --markdown, --breakdown, --only ID]
# --smoke (one row, ctest: e2e_planner_held_out_smoke) fails when the row does not simulate, or when any row of any
# table makes no config (and names no reason it cannot).
set -euo pipefail
build=${1:-build}
shift || true
root=$(cd "$(dirname "$0")/../.." && pwd)
cleave="$root/$build/bin/cleave"
[ -x "$cleave" ] || cleave="$build/bin/cleave"
[ -x "$cleave" ] || cleave="$build"
exec python3 "$root/benchmarks/planner/held_out.py" --cleave "$cleave" "$@"
