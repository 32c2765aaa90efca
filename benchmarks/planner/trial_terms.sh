#!/usr/bin/env bash
# Issue 38 part 5: predicted against measured, term by term, on this machine. Profiles CONFIG's model under
# `mpiexec -n 2` (tables for tp widths up to 4), then runs `cleave plan --trial 3 --explain` at 2 ranks (one per
# core on a 2-core machine) and at 4 ranks (oversubscribed: the launcher gets --oversubscribe): the trial table
# and, per trained plan, its traced step row by row against the prediction with the largest disagreement
# (docs/planner.md, "Predicted against measured, term by term"). Each step runs under the build lock when
# LOCK=/work/build.lock is set (a shared machine: no build beside the timings).
# KEEP=DIR keeps the profile and the plan logs in DIR (to price the same measurement again, e.g. before a change).
# Usage: benchmarks/planner/trial_terms.sh [BUILD_DIR] [CONFIG] [ROUNDS] [STEPS] [WORLDS]
set -euo pipefail
build=${1:-build}; config=${2:-examples/gpt_fortunes.json}; rounds=${3:-3}; steps=${4:-8}; worlds=${5:-"2 4"}
root=$(cd "$(dirname "$0")/../.." && pwd)
cleave="$root/$build/bin/cleave"
config=$(realpath "$config")
[ -n "${KEEP:-}" ] && KEEP=$(realpath -m "$KEEP")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
locked() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }
work=$(mktemp -d)
trap 'if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/*.json "$work"/*.log "$KEEP"/ 2>/dev/null; fi; rm -rf "$work"' EXIT
cd "$work"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "config: $config"
locked mpiexec --oversubscribe -n 2 "$cleave" profile "$config" --world 4 --out prof.json --repeats 3 --rounds 2 \
  < /dev/null > profile.log 2>&1 || { cat profile.log; exit 1; }
grep -E "^(optimizer|p2p|all_reduce)" profile.log || true
for world in $worlds; do
  echo
  echo "== world $world: cleave plan $(basename "$config") --world $world --profile prof.json --top 3 --explain --trial 3" \
       "--trial-rounds $rounds --trial-steps $steps (load $(cut -d' ' -f1-3 /proc/loadavg))"
  locked "$cleave" plan "$config" --world "$world" --profile prof.json --top 3 --explain --trial 3 \
    --trial-rounds "$rounds" --trial-steps "$steps" --trial-spread 0 --launcher "mpiexec --oversubscribe" \
    > "plan_$world.log" 2>&1 || { cat "plan_$world.log"; exit 1; }
  sed -n '/^  #  layout/,/^$/p' "plan_$world.log"
  sed -n '/^ measured   #/,$p' "plan_$world.log"
done
