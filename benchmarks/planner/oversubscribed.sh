#!/usr/bin/env bash
# Predicted against measured for CONFIG's top plans on more ranks than this machine has cores (docs/planner.md, "More
# ranks than cores"): profiles the model under `mpiexec -n 2` (one rank per core on a 2-core machine; the profile's
# time_sharing pins two ranks to one core for a moment), then for each WORLD runs `cleave plan --trial 3` (3
# interleaved rounds of 8 steps, the term-by-term comparison of train.trace's timeline) and prices the same plans on
# the same profile without its time_sharing key (exactly as the planner priced them before it was measured).
# KEEP=DIR keeps the profiles and the plans' JSON in DIR; TRIAL=K trials the top K plans (default 3).
# Usage: benchmarks/planner/oversubscribed.sh [BUILD_DIR] [CONFIG] [ROUNDS] [WORLD ...]   (default worlds: 4 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cleave="$root/${1:-build}/bin/cleave"
cfg=$(realpath "${2:-$root/examples/gpt_fortunes.json}"); rounds=${3:-3}; shift $(( $# < 3 ? $# : 3 ))
worlds=("$@"); [ ${#worlds[@]} -eq 0 ] && worlds=(4 3)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
[ -n "${KEEP:-}" ] && KEEP=$(realpath -m "$KEEP")
w=$(mktemp -d); trap 'if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$w"/*.json "$KEEP"/; fi; rm -rf "$w"' EXIT; cd "$w"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
mpiexec --oversubscribe -n 2 "$cleave" profile "$cfg" --world "$(printf '%s\n' "${worlds[@]}" | sort -n | tail -1)" \
  --out prof.json --repeats 3 --rounds 3 < /dev/null > profile.log 2>&1 || { cat profile.log; exit 1; }
grep -E "^(sync wait|count exchange|time sharing)" profile.log
python3 -c "import json; p=json.load(open('prof.json')); p['measured'].pop('time_sharing', None); json.dump(p, open('prof_without.json','w'))"
for world in "${worlds[@]}"; do
  echo "== world $world ($(nproc) cores), $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$cleave" plan "$cfg" --world "$world" --profile prof.json --top "${TRIAL:-3}" --explain --trial "${TRIAL:-3}" \
    --trial-rounds "$rounds" \
    --trial-steps 8 --trial-spread 0 --json "plan_w$world.json" < /dev/null > "plan_w$world.log" 2>&1 \
    || { tail -20 "plan_w$world.log"; exit 1; }
  grep -m1 -E "^warning: .* puts" "plan_w$world.log" || true
  echo "   (after: load $(cut -d' ' -f1-3 /proc/loadavg))"
  python3 - "$cleave" "$cfg" "$world" "plan_w$world.json" << 'PY'
import json, subprocess, sys
cleave, cfg, world, path = sys.argv[1:]
for p in json.load(open(path))["plans"]:
    if "measured_step_s" not in p: continue
    sets = [a for o in p["overrides"] for a in ("--set", o)]
    out = subprocess.run([cleave, "simulate", "--config", cfg, "--world", world, "--profile", "prof_without.json",
                          "--json", *sets], capture_output=True, text=True, check=True).stdout
    without = json.loads(out[out.index("{"):])
    rounds = ", ".join(f"{r * 1e3:.1f}" for r in p["measured_rounds"])
    print(f"{p['layout']} micro {p['micro_batch']} {' '.join(o.split('.')[-1] for o in p['overrides'] if any(k in o for k in ('schedule', 'zero_', 'sequence', 'recompute')))}: "
          f"pred {p['step_s'] * 1e3:.2f} ms (without time_sharing {without['step_s'] * 1e3:.2f}), measured {p['measured_step_s'] * 1e3:.2f} "
          f"(rounds {rounds}; spread {p['measured_spread'] * 100:.1f}%): pred/meas {p['step_s'] / p['measured_step_s']:.2f} "
          f"(without {without['step_s'] / p['measured_step_s']:.2f})")
    for t in p.get("measured_terms", []):
        print(f"    {t['row']:<30} pred {t['predicted_s'] * 1e3:8.2f}  meas {t['measured_s'] * 1e3:8.2f}   {t['predicted_terms']}")
PY
done
